use serde::Serialize;

/// Columns and rows of the VGA text mode.
pub const COLUMNS: usize = 80;
/// See [`COLUMNS`].
pub const ROWS: usize = 25;
/// The pixel size of one character cell in QEMU's 720x400 text-mode screendump.
pub const CELL_WIDTH_PX: u32 = 9;
/// See [`CELL_WIDTH_PX`].
pub const CELL_HEIGHT_PX: u32 = 16;

/// The screen as text, read exactly from the VGA text buffer.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct TextScreen {
    /// 25 rows of 80 characters (trailing blanks kept).
    pub rows: Vec<String>,
}

/// Where text was found.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct TextMatch {
    /// 0-based row.
    pub row: usize,
    /// 0-based column.
    pub column: usize,
    /// Bounding box in screen pixels: x, y, width, height.
    pub bbox: [u32; 4],
    /// Its center in screen pixels.
    pub center: [u32; 2],
}

fn cp437(b: u8) -> char {
    // The printable ASCII range is the same in code page 437; box drawing and the rest are
    // shown as a middle dot so that columns stay aligned.
    if (0x20..0x7f).contains(&b) {
        b as char
    } else if b == 0 {
        ' '
    } else {
        '·'
    }
}

impl TextScreen {
    /// From the 4000 bytes at 0xB8000 (character, attribute, character, attribute, ...).
    pub fn from_vga(bytes: &[u8]) -> Self {
        let rows = bytes
            .chunks(COLUMNS * 2)
            .take(ROWS)
            .map(|row| row.iter().step_by(2).map(|&b| cp437(b)).collect())
            .collect();
        Self { rows }
    }

    /// The screen as one string, trailing blanks trimmed, one line per row.
    pub fn text(&self) -> String {
        self.rows
            .iter()
            .map(|r| r.trim_end())
            .collect::<Vec<_>>()
            .join("\n")
            .trim_end()
            .to_owned()
    }

    /// Every place `needle` occurs (exactly; text mode is exact), top to bottom.
    pub fn find(&self, needle: &str) -> Vec<TextMatch> {
        let mut out = Vec::new();
        if needle.is_empty() {
            return out;
        }
        for (row, line) in self.rows.iter().enumerate() {
            let chars: Vec<char> = line.chars().collect();
            let want: Vec<char> = needle.chars().collect();
            for column in 0..chars.len().saturating_sub(want.len() - 1) {
                if chars[column..column + want.len()] == want[..] {
                    let x = column as u32 * CELL_WIDTH_PX;
                    let y = row as u32 * CELL_HEIGHT_PX;
                    let w = want.len() as u32 * CELL_WIDTH_PX;
                    out.push(TextMatch {
                        row,
                        column,
                        bbox: [x, y, w, CELL_HEIGHT_PX],
                        center: [x + w / 2, y + CELL_HEIGHT_PX / 2],
                    });
                }
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn vga_bytes_become_rows_and_text_is_found_with_its_box() {
        let mut bytes = vec![0u8; 4000];
        for (i, b) in b"# echo hi".iter().enumerate() {
            bytes[160 * 3 + i * 2] = *b;
            bytes[160 * 3 + i * 2 + 1] = 0x07;
        }
        let screen = TextScreen::from_vga(&bytes);
        assert_eq!(screen.rows.len(), 25);
        assert_eq!(screen.text(), "\n\n\n# echo hi");
        let found = screen.find("echo");
        assert_eq!(found.len(), 1);
        assert_eq!((found[0].row, found[0].column), (3, 2));
        assert_eq!(found[0].bbox, [18, 48, 36, 16]);
        assert_eq!(found[0].center, [36, 56]);
        assert!(screen.find("absent").is_empty());
    }
}
