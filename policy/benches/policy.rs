//! Policy evaluation of a typical write_file with 10 deny globs (target: median under 2 µs),
//! simulate of a 20-leaf pipeline (target: under 1 ms), and the price of one metadata system call.

use aido_actions::Action;
use aido_policy::resolve::normalize_lexically;
use aido_policy::{
    Environment, FsResolver, Layered, PathResolver, PolicyEngine, ResolveError, SessionContext,
    Source,
};
use criterion::{Criterion, black_box, criterion_group, criterion_main};
use serde_json::json;

/// Resolves by text alone (no symlinks followed): isolates the gates from the filesystem.
struct Lexical;

impl PathResolver for Lexical {
    fn resolve(&self, path: &std::path::Path) -> Result<std::path::PathBuf, ResolveError> {
        Ok(normalize_lexically(path))
    }
}

fn engine(home: &std::path::Path) -> PolicyEngine {
    let text = r#"
[paths]
deny = ["**/.git/objects/**", "**/*.pem", "**/id_rsa*", "**/secrets/**", "/etc/**", "**/.npmrc", "**/node_modules/.bin/**"]
"#;
    let config = Layered::from_layers(&[(Source::File("bench".into()), text)]).map(|l| l.config);
    let env = Environment {
        home: home.to_owned(),
        aido_home: home.join(".aido"),
    };
    match config.and_then(|c| PolicyEngine::new(&c, &env, &FsResolver)) {
        Ok(e) => e,
        Err(e) => panic!("bench config: {e}"),
    }
}

fn bench(c: &mut Criterion) {
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let home = dir.path().canonicalize().unwrap_or_else(|e| panic!("{e}"));
    std::fs::create_dir_all(home.join("project/src")).unwrap_or_else(|e| panic!("{e}"));
    let engine = engine(&home);
    assert_eq!(
        engine.config().paths.deny.len(),
        10,
        "3 built-in + 7 configured deny globs"
    );
    let ctx = SessionContext::new(home.join("project"));
    let write = Action::from_tool_call(
        "write_file",
        json!({"path": "src/main.rs", "content": "fn main() {}\n"}),
    )
    .unwrap_or_else(|e| panic!("{e}"));
    assert!(engine.evaluate(&write, &ctx, &FsResolver).is_allow());
    c.bench_function("policy_evaluate_write_file_10_deny_globs", |b| {
        b.iter(|| engine.evaluate(black_box(&write), &ctx, &FsResolver))
    });
    // The same evaluation with path resolution answered without system calls: the cost of
    // the gates and the globs alone. The difference is one system call per component below
    // the nearest anchor (`~` here: project, project/src, project/src/main.rs), whose price
    // depends on the machine's kernel.
    assert!(engine.evaluate(&write, &ctx, &Lexical).is_allow());
    c.bench_function("policy_gates_write_file_10_deny_globs", |b| {
        b.iter(|| engine.evaluate(black_box(&write), &ctx, &Lexical))
    });

    let steps: Vec<_> = (0..20)
        .map(|i| match i % 4 {
            0 => json!({"type": "write_file", "path": format!("src/f{i}.rs"), "content": "x"}),
            1 => json!({"type": "read_file", "path": format!("src/f{}.rs", i - 1)}),
            2 => json!({"type": "edit_file", "path": format!("src/f{}.rs", i - 2), "old_string": "x", "new_string": "y"}),
            _ => json!({"type": "checksum", "path": format!("src/f{}.rs", i - 3)}),
        })
        .collect();
    let pipeline = Action::from_tool_call("pipeline", json!({"steps": steps}))
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(pipeline.leaves().len(), 20);
    c.bench_function("simulate_pipeline_20_leaves", |b| {
        b.iter(|| engine.simulate(black_box(&pipeline), &ctx, &FsResolver))
    });

    // The price of one metadata system call on a cached file in the temp dir: the full
    // evaluation differs from the gates alone by the calls its path resolution makes, and
    // aido-bench reports that difference in these units.
    let file = home.join("file.txt");
    std::fs::write(&file, "x\n").unwrap_or_else(|e| panic!("{e}"));
    c.bench_function("metadata_call", |b| {
        b.iter(|| std::fs::symlink_metadata(black_box(&file)))
    });
}

criterion_group!(benches, bench);
criterion_main!(benches);
