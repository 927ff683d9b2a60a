//! Reading a graphical screen: the framebuffer guest (bochs DRM, 1280x800, TER16x32 font) is
//! read by tesseract. Measures character accuracy on a known screen and finds text with boxes.

#![allow(clippy::unwrap_used, clippy::expect_used)] // helpers of tests may fail loudly

use crate::common;

use common::guest_fb;

use aido_vm::{Machine, MachineSpec, Ocr};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ocr_reads_a_framebuffer_screen_and_finds_text() {
    assert_eq!(
        std::env::var("OMP_THREAD_LIMIT").as_deref(),
        Ok("1"),
        "set by .cargo/config.toml"
    );
    let spec = MachineSpec::framebuffer(&guest_fb());
    let vm = Machine::boot(&spec).await.unwrap();
    let ocr = Ocr::start().unwrap();
    let png = vm.screenshot_png().await.unwrap();
    let size = (
        u32::from_be_bytes(png[16..20].try_into().unwrap()),
        u32::from_be_bytes(png[20..24].try_into().unwrap()),
    );
    eprintln!("framebuffer screen {size:?} on {}", vm.accel().name());
    assert_ne!(size, (720, 400), "a graphical screen, not VGA text");
    let prompt = vm
        .wait_for_screen_text("BusyBox", &ocr, 60_000)
        .await
        .unwrap();
    assert_eq!(prompt.source, "ocr");

    let lines = [
        "Quick brown fox 0123",
        "jumps over 4567 lazy",
        "dogs near the river",
    ];
    vm.type_text("clear\n").await.unwrap();
    for line in lines {
        vm.type_text(&format!("echo '{line}'\n")).await.unwrap();
    }
    let found = vm
        .wait_for_screen_text("dogs near the river", &ocr, 60_000)
        .await
        .unwrap();
    assert!(found.bbox[2] > 100 && found.bbox[3] > 10, "{found:?}");
    assert!(found.center[0] > found.bbox[0] && found.center[1] > found.bbox[1]);

    // Accuracy on the known screen: every expected line against the best OCR line.
    let started = std::time::Instant::now();
    let words = ocr.words(&vm.screenshot_png().await.unwrap()).unwrap();
    eprintln!("OCR of the whole screen took {:?}", started.elapsed());
    let mut by_line: Vec<(u32, u32, u32, String)> = Vec::new();
    for w in &words {
        match by_line.last_mut() {
            Some(l) if (l.0, l.1, l.2) == w.line => {
                l.3.push(' ');
                l.3.push_str(&w.text);
            }
            _ => by_line.push((w.line.0, w.line.1, w.line.2, w.text.clone())),
        }
    }
    let mut total = 0.0;
    for expected in lines {
        let best = by_line
            .iter()
            .filter(|l| !l.3.contains("echo"))
            .map(|l| strsim::normalized_levenshtein(&l.3, expected))
            .fold(0.0, f64::max);
        eprintln!("  {expected:?}: {:.1}%", best * 100.0);
        total += best;
    }
    let accuracy = total / lines.len() as f64;
    eprintln!(
        "character accuracy on the known screen: {:.1}%",
        accuracy * 100.0
    );
    assert!(accuracy >= 0.85, "accuracy {accuracy:.3}");
    vm.shutdown().await;
}
