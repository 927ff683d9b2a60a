//! Cutting a region out of a screenshot (the `zoom` of computer-use agents).

use crate::error::VmError;

fn bad(message: String) -> VmError {
    VmError::Qmp {
        command: "screendump",
        message,
    }
}

/// The part of `png` inside `[x0, y0, x1, y1]` (pixels, end exclusive), as a new PNG.
pub fn crop_png(png: &[u8], region: [u32; 4]) -> Result<Vec<u8>, VmError> {
    let decoder = png::Decoder::new(std::io::Cursor::new(png));
    let mut reader = decoder
        .read_info()
        .map_err(|e| bad(format!("cannot read the screenshot: {e}")))?;
    let mut buf = vec![0; reader.output_buffer_size().unwrap_or(0)];
    let info = reader
        .next_frame(&mut buf)
        .map_err(|e| bad(format!("cannot read the screenshot: {e}")))?;
    let channels = info.color_type.samples();
    if info.bit_depth != png::BitDepth::Eight {
        return Err(bad("the screenshot is not 8 bits per sample".into()));
    }
    let [x0, y0, x1, y1] = region;
    if x0 >= x1 || y0 >= y1 || x1 > info.width || y1 > info.height {
        return Err(VmError::UnknownKey {
            what: format!(
                "region {region:?} outside the {}x{} screen",
                info.width, info.height
            ),
        });
    }
    let (w, h) = (x1 - x0, y1 - y0);
    let mut out = Vec::with_capacity((w * h) as usize * channels);
    for y in y0..y1 {
        let row = &buf[(y as usize * info.line_size)..];
        out.extend_from_slice(&row[x0 as usize * channels..x1 as usize * channels]);
    }
    let mut encoded = Vec::new();
    {
        let mut encoder = png::Encoder::new(&mut encoded, w, h);
        encoder.set_color(info.color_type);
        encoder.set_depth(png::BitDepth::Eight);
        let mut writer = encoder.write_header().map_err(|e| bad(e.to_string()))?;
        writer
            .write_image_data(&out)
            .map_err(|e| bad(e.to_string()))?;
    }
    Ok(encoded)
}

/// A screenshot as PNG: PNG is passed through; anything else the image crate reads (the PPM
/// older libvirt hosts send) is converted.
pub fn to_png(shot: &[u8]) -> Result<Vec<u8>, VmError> {
    if shot.starts_with(b"\x89PNG\r\n\x1a\n") {
        return Ok(shot.to_vec());
    }
    let decoded = image::load_from_memory(shot)
        .map_err(|e| bad(format!("cannot read the screenshot: {e}")))?;
    let mut png = Vec::new();
    decoded
        .write_to(&mut std::io::Cursor::new(&mut png), image::ImageFormat::Png)
        .map_err(|e| bad(format!("cannot encode the screenshot: {e}")))?;
    Ok(png)
}
