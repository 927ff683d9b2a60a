//! The OCR helper's side (`aido-native ocr`): one tesseract engine (English), kept between
//! frames (creating one costs ~100 ms) and made again after a failure, which consumes it.

use aido_vm::VmError;
use aido_vm::native::{OcrRequest, Reply, read_frame, write_frame};

fn fail(message: impl Into<String>) -> VmError {
    VmError::Ocr {
        message: message.into(),
    }
}

fn engine() -> Result<tesseract::Tesseract, VmError> {
    tesseract::Tesseract::new(None, Some("eng"))
        .map_err(|e| fail(format!("cannot start tesseract: {e}")))
}

/// Serves OCR requests over standard input and output until the input closes: see
/// [`aido_vm::native`].
pub fn serve() -> std::process::ExitCode {
    let (mut input, mut output) = (std::io::stdin().lock(), std::io::stdout().lock());
    let mut held: Option<tesseract::Tesseract> = None;
    while let Ok(Some((request, frame))) = read_frame::<OcrRequest>(&mut input) {
        let answered = match request {
            OcrRequest::Start => match held.take().map_or_else(engine, Ok) {
                Ok(ready) => {
                    held = Some(ready);
                    Ok(String::new())
                }
                Err(error) => Err(error),
            },
            OcrRequest::Recognize { width, height, ppi } => {
                match held.take().map_or_else(engine, Ok) {
                    Ok(ready) => {
                        let (tsv, back) = recognize(ready, &frame, width, height, ppi);
                        held = back;
                        tsv
                    }
                    Err(error) => Err(error),
                }
            }
        };
        let reply = match answered {
            Ok(tsv) => Reply::Done { value: tsv },
            Err(error) => Reply::failed(&error),
        };
        if write_frame(&mut output, &reply, &[]).is_err() {
            break;
        }
    }
    std::process::ExitCode::SUCCESS
}

/// tesseract's TSV of a grey frame; the engine back unless the failure consumed it.
fn recognize(
    engine: tesseract::Tesseract,
    frame: &[u8],
    width: u32,
    height: u32,
    ppi: u32,
) -> (Result<String, VmError>, Option<tesseract::Tesseract>) {
    let pixels = u64::from(width) * u64::from(height);
    if width == 0 || height == 0 || pixels != frame.len() as u64 {
        return (
            Err(fail(format!(
                "a {width}x{height} frame needs {pixels} bytes, not {}",
                frame.len()
            ))),
            Some(engine),
        );
    }
    let (Ok(w), Ok(h), Ok(ppi)) = (
        i32::try_from(width),
        i32::try_from(height),
        i32::try_from(ppi),
    ) else {
        return (Err(fail("the frame is too large")), Some(engine));
    };
    let engine = match engine.set_frame(frame, w, h, 1, w) {
        Ok(e) => e,
        Err(e) => return (Err(fail(format!("cannot load the frame: {e}"))), None),
    };
    let mut engine = match engine.set_source_resolution(ppi).recognize() {
        Ok(e) => e,
        Err(e) => return (Err(fail(format!("recognition failed: {e}"))), None),
    };
    match engine.get_tsv_text(0) {
        Ok(tsv) => (Ok(tsv), Some(engine)),
        Err(e) => (Err(fail(format!("no text: {e}"))), Some(engine)),
    }
}
