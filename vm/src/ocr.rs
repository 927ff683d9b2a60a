//! Reading a graphical screen with tesseract. The engine lives in a helper process
//! ([`crate::native`]: aido links no tesseract) fed by one worker thread here (creating an
//! engine costs ~100 ms; reusing it costs nothing), fed screenshots upscaled 2x with a smooth
//! (triangle) filter, which reads console fonts markedly better than 1x. Text is matched
//! fuzzily: OCR confuses quotes, brackets, 0/O, l/1/I and m/rn, so a match is the window of
//! words on one line closest to the needle, accepted above a similarity threshold.
//!
//! tesseract is 5-9x faster on 2 cores with `OMP_THREAD_LIMIT=1` in the process environment;
//! the helper is started with it.

use std::sync::mpsc;

use serde::Serialize;

use crate::error::VmError;
use crate::native::{Helper, OCR_MODE, OcrRequest};

/// Words below this confidence (0-100) are dropped.
const WORD_CONFIDENCE_MIN: f32 = 10.0;
/// A fuzzy match needs at least this normalized similarity (0-1).
pub const SIMILARITY_MIN: f64 = 0.8;
/// The upscale factor before recognition.
const UPSCALE: u32 = 2;
/// The resolution tesseract assumes for the upscaled frame.
const SOURCE_PPI: u32 = 140;

/// One recognized word, in screen pixels.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Word {
    /// The text.
    pub text: String,
    /// x, y, width, height.
    pub bbox: [u32; 4],
    /// tesseract's confidence, 0-100.
    pub confidence: f32,
    /// (block, paragraph, line): words with the same key are on one line.
    pub line: (u32, u32, u32),
}

/// A fuzzy match of a needle on the screen.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct OcrMatch {
    /// What OCR read there.
    pub text: String,
    /// x, y, width, height in screen pixels.
    pub bbox: [u32; 4],
    /// Its center.
    pub center: [u32; 2],
    /// Normalized similarity to the needle, 0-1.
    pub similarity: f64,
}

type Job = (Vec<u8>, mpsc::Sender<Result<Vec<Word>, VmError>>);

/// A tesseract engine in its helper process, asked by a worker thread. Clones share it.
#[derive(Clone)]
pub struct Ocr {
    jobs: mpsc::Sender<Job>,
}

fn fail(message: impl Into<String>) -> VmError {
    VmError::Ocr {
        message: message.into(),
    }
}

impl Ocr {
    /// Start the helper and its engine (English); fails if either cannot start.
    pub fn start() -> Result<Self, VmError> {
        let mut helper = Some(Helper::start(OCR_MODE)?);
        ask(&mut helper, &OcrRequest::Start, &[])?;
        let (jobs, queue) = mpsc::channel::<Job>();
        std::thread::Builder::new()
            .name("aido-ocr".into())
            .spawn(move || {
                while let Ok((png, reply)) = queue.recv() {
                    let _ = reply.send(words_of(&mut helper, &png));
                }
                if let Some(helper) = helper {
                    helper.finish();
                }
            })
            .map_err(|e| fail(e.to_string()))?;
        Ok(Self { jobs })
    }

    /// Every word on the screen.
    pub fn words(&self, png: &[u8]) -> Result<Vec<Word>, VmError> {
        let (tx, rx) = mpsc::channel();
        self.jobs
            .send((png.to_vec(), tx))
            .map_err(|_| fail("the OCR worker is gone"))?;
        rx.recv().map_err(|_| fail("the OCR worker is gone"))?
    }
}

/// The words of a PNG or PPM screen (what a screendump gives).
fn words_of(helper: &mut Option<Helper>, png: &[u8]) -> Result<Vec<Word>, VmError> {
    let image = image::load_from_memory(png)
        .map_err(|e| fail(format!("not a PNG or PPM image: {e}")))?
        .to_luma8();
    let (w, h) = (image.width() * UPSCALE, image.height() * UPSCALE);
    let big = image::imageops::resize(&image, w, h, image::imageops::FilterType::Triangle);
    let request = OcrRequest::Recognize {
        width: w,
        height: h,
        ppi: SOURCE_PPI,
    };
    let tsv = ask(helper, &request, &big.into_raw())?;
    Ok(parse_tsv(&tsv, UPSCALE))
}

/// The helper's answer (tesseract's TSV for a frame); a helper that died since the last call
/// is started again first.
fn ask(helper: &mut Option<Helper>, request: &OcrRequest, body: &[u8]) -> Result<String, VmError> {
    let running = match helper {
        Some(running) => running,
        None => helper.insert(Helper::start(OCR_MODE)?),
    };
    match running.call::<_, String>(request, body) {
        Ok((tsv, _)) => Ok(tsv),
        Err(error) => {
            // A helper that broke is not asked again; an engine error leaves it running.
            if matches!(error, VmError::Helper { .. })
                && let Some(broken) = helper.take()
            {
                broken.finish();
            }
            Err(error)
        }
    }
}

/// Words from tesseract's TSV (level 5 rows), scaled back by `scale`.
fn parse_tsv(tsv: &str, scale: u32) -> Vec<Word> {
    tsv.lines()
        .filter_map(|row| {
            let c: Vec<&str> = row.split('\t').collect();
            if c.len() < 12 || c[0] != "5" {
                return None;
            }
            let n = |i: usize| c[i].parse::<u32>().ok();
            let confidence: f32 = c[10].parse().ok()?;
            let text = c[11].trim();
            if text.is_empty() || confidence < WORD_CONFIDENCE_MIN {
                return None;
            }
            Some(Word {
                text: text.to_owned(),
                bbox: [
                    n(6)? / scale,
                    n(7)? / scale,
                    n(8)?.div_ceil(scale),
                    n(9)?.div_ceil(scale),
                ],
                confidence,
                line: (n(2)?, n(3)?, n(4)?),
            })
        })
        .collect()
}

/// The best fuzzy matches of `needle` among `words`, best first.
pub fn find(words: &[Word], needle: &str) -> Vec<OcrMatch> {
    let want = needle.split_whitespace().count().max(1);
    let mut lines: Vec<Vec<&Word>> = Vec::new();
    for w in words {
        match lines.last_mut() {
            Some(line) if line[0].line == w.line => line.push(w),
            _ => lines.push(vec![w]),
        }
    }
    let mut out = Vec::new();
    for line in &lines {
        // Windows of about as many words as the needle (one fewer or more: OCR splits and
        // joins words).
        for size in want.saturating_sub(1).max(1)..=want + 1 {
            for window in line.windows(size.min(line.len())) {
                let text = window
                    .iter()
                    .map(|w| w.text.as_str())
                    .collect::<Vec<_>>()
                    .join(" ");
                let similarity =
                    strsim::normalized_levenshtein(&text.to_lowercase(), &needle.to_lowercase());
                if similarity >= SIMILARITY_MIN {
                    let x0 = window.iter().map(|w| w.bbox[0]).min().unwrap_or(0);
                    let y0 = window.iter().map(|w| w.bbox[1]).min().unwrap_or(0);
                    let x1 = window
                        .iter()
                        .map(|w| w.bbox[0] + w.bbox[2])
                        .max()
                        .unwrap_or(0);
                    let y1 = window
                        .iter()
                        .map(|w| w.bbox[1] + w.bbox[3])
                        .max()
                        .unwrap_or(0);
                    out.push(OcrMatch {
                        text,
                        bbox: [x0, y0, x1 - x0, y1 - y0],
                        center: [(x0 + x1) / 2, (y0 + y1) / 2],
                        similarity,
                    });
                }
            }
        }
    }
    out.sort_by(|a, b| {
        b.similarity
            .total_cmp(&a.similarity)
            .then(a.bbox[1].cmp(&b.bbox[1]))
    });
    out.dedup_by(|a, b| a.bbox == b.bbox);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tsv_rows_become_words_and_fuzzy_find_tolerates_ocr_confusions() {
        let tsv = "level\tpage_num\tblock_num\tpar_num\tline_num\tword_num\tleft\ttop\twidth\theight\tconf\ttext\n\
                   5\t1\t1\t1\t1\t1\t20\t40\t60\t30\t91.0\techo\n\
                   5\t1\t1\t1\t1\t2\t100\t40\t120\t30\t88.0\tHe1lo-wor1d\n\
                   5\t1\t1\t1\t2\t1\t20\t80\t60\t30\t5.0\tnoise\n";
        let words = parse_tsv(tsv, 2);
        assert_eq!(words.len(), 2, "the low-confidence word is dropped");
        assert_eq!(words[1].bbox, [50, 20, 60, 15]);
        let found = find(&words, "Hello-world");
        assert_eq!(found[0].text, "He1lo-wor1d");
        assert!(found[0].similarity >= SIMILARITY_MIN);
        assert_eq!(found[0].center, [80, 27]);
        assert!(find(&words, "something else entirely").is_empty());
    }
}
