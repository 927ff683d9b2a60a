//! The world the runtime tests share: a real runtime on a sled journal (group commit) with a
//! fixed clock, its config the layered text a test gives (`aido-testkit`'s).

pub use aido_testkit::runtime::start as runtime;
