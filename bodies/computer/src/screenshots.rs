//! Screenshots at the agent's size: scaled down (or up, for a zoom) with a filter that keeps
//! text legible, cut to a region, encoded as PNG. An image already at its size passes through
//! untouched, so a screen that fits the budget costs no decoding.

use aido_walk::computer::ComputerError;
use image::imageops::FilterType;
use image::{DynamicImage, ImageFormat};

fn failed(e: impl std::fmt::Display) -> ComputerError {
    ComputerError::ImageFailed { why: e.to_string() }
}

fn decode(png: &[u8]) -> Result<DynamicImage, ComputerError> {
    image::load_from_memory_with_format(png, ImageFormat::Png).map_err(failed)
}

fn encode(image: &DynamicImage) -> Result<Vec<u8>, ComputerError> {
    let mut out = Vec::new();
    image
        .write_to(&mut std::io::Cursor::new(&mut out), ImageFormat::Png)
        .map_err(failed)?;
    Ok(out)
}

fn resized(image: DynamicImage, [w, h]: [u32; 2]) -> DynamicImage {
    if image.width() == w && image.height() == h {
        return image;
    }
    // Smaller: a triangle filter averages the pixels it drops; larger: Catmull-Rom keeps
    // edges (text) sharp.
    let filter = if w < image.width() {
        FilterType::Triangle
    } else {
        FilterType::CatmullRom
    };
    image.resize_exact(w, h, filter)
}

/// `png` at `size`.
pub(super) fn fit(png: &[u8], size: [u32; 2]) -> Result<Vec<u8>, ComputerError> {
    let image = decode(png)?;
    if [image.width(), image.height()] == size {
        return Ok(png.to_vec());
    }
    encode(&resized(image, size))
}

/// The part of `png` inside `region` (real pixels, end exclusive), at `size`.
pub(super) fn zoom(png: &[u8], region: [u32; 4], size: [u32; 2]) -> Result<Vec<u8>, ComputerError> {
    let image = decode(png)?;
    let [x0, y0, x1, y1] = region;
    if x1 > image.width() || y1 > image.height() || x0 >= x1 || y0 >= y1 {
        return Err(ComputerError::RegionInvalid {
            region,
            width: image.width(),
            height: image.height(),
        });
    }
    encode(&resized(image.crop_imm(x0, y0, x1 - x0, y1 - y0), size))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn png(w: u32, h: u32) -> Vec<u8> {
        let mut img = image::RgbImage::new(w, h);
        for (x, y, p) in img.enumerate_pixels_mut() {
            *p = image::Rgb([(x % 256) as u8, (y % 256) as u8, 0]);
        }
        encode(&DynamicImage::ImageRgb8(img)).unwrap()
    }

    #[test]
    fn screenshots_are_scaled_and_zooms_cut_from_the_real_pixels() {
        let real = png(64, 40);
        assert_eq!(fit(&real, [64, 40]).unwrap(), real, "passes through");
        let small = decode(&fit(&real, [32, 20]).unwrap()).unwrap();
        assert_eq!((small.width(), small.height()), (32, 20));
        let part = decode(&zoom(&real, [10, 5, 20, 10], [10, 5]).unwrap()).unwrap();
        // The cut's first pixel is the real pixel (10, 5).
        assert_eq!(part.to_rgb8().get_pixel(0, 0).0, [10, 5, 0]);
        let big = decode(&zoom(&real, [10, 5, 20, 10], [40, 20]).unwrap()).unwrap();
        assert_eq!((big.width(), big.height()), (40, 20));
        assert_eq!(
            zoom(&real, [10, 5, 70, 10], [1, 1]).unwrap_err().code(),
            "computer_region_invalid"
        );
    }
}
