//! A minimal host for the sandbox child, for tests and benches: `aido-sandbox CMD ARGS...`
//! runs one command confined with the current directory writable. aido itself hosts the
//! child in its own binary the same way.

fn main() {
    aido_sandbox::run_child_if_requested();
    let argv: Vec<String> = std::env::args().skip(1).collect();
    if argv.is_empty() {
        eprintln!("usage: aido-sandbox CMD [ARGS...]");
        std::process::exit(2);
    }
    let result = (|| -> Result<aido_sandbox::Outcome, Box<dyn std::error::Error>> {
        let cwd = std::env::current_dir()?;
        let sandbox = aido_sandbox::Sandbox::new(std::env::current_exe()?);
        let profile = aido_sandbox::Profile::new(vec![cwd.clone()]);
        Ok(sandbox.run(&profile, &aido_sandbox::Request::new(argv, &cwd))?)
    })();
    match result {
        Ok(outcome) => {
            use std::io::Write;
            let _ = std::io::stdout().write_all(&outcome.stdout);
            let _ = std::io::stderr().write_all(&outcome.stderr);
            std::process::exit(match outcome.exit {
                aido_sandbox::Exit::Code(code) => code,
                aido_sandbox::Exit::Signal(signal) => 128 + signal,
                aido_sandbox::Exit::TimedOut => 124,
            });
        }
        Err(error) => {
            eprintln!("aido-sandbox: {error}");
            std::process::exit(125);
        }
    }
}
