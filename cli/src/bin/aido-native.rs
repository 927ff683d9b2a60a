//! `aido-native`: the helper that hosts tesseract and libvirt for aido, so that aido links
//! neither (see the `aido-native` crate). aido starts it beside itself, one process per OCR
//! engine and per machine on a libvirt host, and speaks to it over its standard input and
//! output.

fn main() -> std::process::ExitCode {
    aido_native::main()
}
