//! The primitive families this build of aido holds. Each body but the filesystem, the
//! runtime and composites is a cargo feature (`prim-vm`, `prim-process`, ...), on by default.
//! A build without one compiles without its crates; its tools are not listed, and the policy
//! refuses its actions with `primitive_not_built` (journaled like any refusal, and answered
//! by `simulate` and `policy_check` too).

use aido_actions::{Action, Body};

/// One family: the body, the cargo feature that adds it, and whether this build has it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Family {
    /// The body its primitives route to.
    pub body: Body,
    /// The cargo feature of `aido-actors` (and of the `aido` package) that adds it.
    pub feature: &'static str,
    /// Whether this build has it.
    pub built: bool,
}

/// Every optional family.
pub const FAMILIES: &[Family] = &[
    Family {
        body: Body::Machine,
        feature: "prim-vm",
        built: cfg!(feature = "prim-vm"),
    },
    Family {
        body: Body::Process,
        feature: "prim-process",
        built: cfg!(feature = "prim-process"),
    },
    Family {
        body: Body::Memory,
        feature: "prim-memory",
        built: cfg!(feature = "prim-memory"),
    },
    Family {
        body: Body::Search,
        feature: "prim-search",
        built: cfg!(feature = "prim-search"),
    },
    Family {
        body: Body::Human,
        feature: "prim-human",
        built: cfg!(feature = "prim-human"),
    },
    Family {
        body: Body::Net,
        feature: "prim-net",
        built: cfg!(feature = "prim-net"),
    },
    Family {
        body: Body::Desktop,
        feature: "prim-desktop",
        built: cfg!(feature = "prim-desktop"),
    },
    Family {
        body: Body::Browser,
        feature: "prim-browser",
        built: cfg!(feature = "prim-browser"),
    },
    Family {
        body: Body::Gateway,
        feature: "prim-gateway",
        built: cfg!(feature = "prim-gateway"),
    },
    Family {
        body: Body::Script,
        feature: "prim-script",
        built: cfg!(feature = "prim-script"),
    },
    Family {
        body: Body::Artifact,
        feature: "prim-artifact",
        built: cfg!(feature = "prim-artifact"),
    },
];

/// Whether this build runs `body`'s primitives (the core bodies always).
pub fn is_built(body: Body) -> bool {
    FAMILIES.iter().all(|f| f.body != body || f.built)
}

/// Whether this build runs the primitive named `name` (false for unknown names).
pub fn primitive_built(name: &str) -> bool {
    Action::body_of(name).is_some_and(is_built)
}

/// The bodies this build lacks, each with its feature: what the policy refuses.
pub fn unbuilt() -> Vec<(Body, &'static str)> {
    FAMILIES
        .iter()
        .filter(|f| !f.built)
        .map(|f| (f.body, f.feature))
        .collect()
}

/// The refusal a body this build lacks answers with, for the paths that reach it without the
/// policy (it refuses them first).
#[cfg_attr(
    all(
        feature = "prim-vm",
        feature = "prim-process",
        feature = "prim-memory",
        feature = "prim-search",
        feature = "prim-human",
        feature = "prim-net",
        feature = "prim-desktop",
        feature = "prim-browser",
        feature = "prim-gateway",
        feature = "prim-script",
        feature = "prim-artifact"
    ),
    expect(dead_code, reason = "every family is built")
)]
pub(crate) fn not_built(body: Body) -> aido_actions::Failure {
    let feature = FAMILIES
        .iter()
        .find(|f| f.body == body)
        .map_or("?", |f| f.feature);
    aido_actions::Failure::new(
        aido_actions::DenyCode::PrimitiveNotBuilt.code(),
        format!("this aido was built without the {feature} cargo feature"),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every optional body is a family, each once, and the core is always built.
    #[test]
    fn every_optional_body_is_one_family() {
        // The desktop body is built always for now (it is off by default through
        // desktop.enabled); a prim-desktop family is left to the lead's merge.
        let core = [Body::Filesystem, Body::Runtime, Body::Tree];
        for body in Body::ALL {
            let families = FAMILIES.iter().filter(|f| f.body == *body).count();
            assert_eq!(families, usize::from(!core.contains(body)), "{body:?}");
        }
        for body in core {
            assert!(is_built(body));
        }
        assert!(primitive_built("read_file"));
        assert!(!primitive_built("no_such_primitive"));
        assert_eq!(
            primitive_built("vm_start"),
            cfg!(feature = "prim-vm"),
            "vm_start follows prim-vm"
        );
    }
}
