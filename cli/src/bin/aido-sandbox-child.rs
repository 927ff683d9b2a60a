//! The small executable that hosts aido's sandbox child: the same code `aido` runs when it
//! re-executes itself (`aido_sandbox::run_child_if_requested`), in a binary that links only
//! the sandbox, so each confined command starts in about a millisecond instead of the tens
//! aido's own start-up costs (it links tesseract, libvirt and seventy other libraries). aido
//! uses it when it sits beside the `aido` binary with the same build id; otherwise aido hosts
//! the child itself. It does nothing else.

fn main() {
    aido_sandbox::run_child_if_requested();
    eprintln!(
        "{}: the sandbox helper of aido (build {}); aido starts it, nothing else should",
        aido_sandbox::HELPER_NAME,
        aido_sandbox::BUILD_ID
    );
    std::process::exit(2);
}
