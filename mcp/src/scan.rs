//! A bounded, streaming look at one JSON-RPC line: what it cannot hide even when it is too big
//! to keep, too deep to parse or not JSON at all.
//!
//! The scanner sees every byte of a line exactly once, in chunks, and keeps only a fixed amount
//! of state: its nesting depth as a counter (no stack, no recursion), the keys and states of the
//! first two levels of objects, and up to [`FIELD_BYTES_MAX`] bytes of three fields: the
//! top-level `id` and `method` and `params.name` (the tool of a `tools/call`). So a 50 MB line
//! can be discarded as it arrives and still be answered with its own id.
//!
//! It is not a validator: on malformed input it recovers what it can and never fails. Keys
//! written with escapes (`"\u0069d"`) are not recognised; a client that spells `id` that way gets
//! a null id in an error response, which JSON-RPC allows when the id cannot be read.

use serde_json::Value;

/// The longest `id`, `method` or tool name the scanner keeps, in bytes of JSON text.
pub(crate) const FIELD_BYTES_MAX: usize = 256;

/// The longest key the scanner needs to recognise (`method`, `params`), in bytes.
const KEY_BYTES_MAX: usize = 8;

/// What the scanner recovered from a line.
#[derive(Debug, Default, PartialEq)]
pub(crate) struct Found {
    /// The top-level `id`, when it is a string or an integer (the ids MCP allows).
    pub id: Option<Value>,
    /// The top-level `method`, when it is a string.
    pub method: Option<String>,
    /// `params.name`, when it is a string: the tool a `tools/call` names.
    pub tool: Option<String>,
}

/// The streaming state for one line. Feed it the line's bytes, then read what it found.
#[derive(Debug, Default)]
pub(crate) struct Scan {
    bytes: u64,
    depth: u64,
    depth_max: u64,
    string: bool,
    escape: bool,
    /// The containers at depth 1 and 2, the only ones whose keys matter.
    frames: [Frame; 2],
    /// The key being read, at depth 1 or 2.
    key: Option<KeyText>,
    /// The wanted value being read.
    capture: Option<Capture>,
    id: Option<Vec<u8>>,
    method: Option<Vec<u8>>,
    tool: Option<Vec<u8>>,
}

#[derive(Debug, Default, Clone, Copy)]
struct Frame {
    object: bool,
    expect: Expect,
    /// The key whose value comes next or is being read.
    key: Key,
    /// The key this container is the value of, in the frame above.
    parent: Key,
}

#[derive(Debug, Default, Clone, Copy, PartialEq)]
enum Expect {
    #[default]
    Key,
    Colon,
    Value,
    Comma,
}

#[derive(Debug, Default, Clone, Copy, PartialEq)]
enum Key {
    #[default]
    Other,
    Id,
    Method,
    Params,
    Name,
}

#[derive(Debug, Default)]
struct KeyText {
    text: [u8; KEY_BYTES_MAX],
    len: usize,
    /// Longer than any wanted key, or written with an escape.
    other: bool,
}

#[derive(Debug, Clone, Copy)]
enum Field {
    Id,
    Method,
    Tool,
}

#[derive(Debug)]
struct Capture {
    field: Field,
    /// The value's JSON text, quotes included for a string.
    text: Vec<u8>,
    string: bool,
    overflow: bool,
}

impl Scan {
    /// Feed the next bytes of the line (without its terminating newline).
    pub(crate) fn feed(&mut self, bytes: &[u8]) {
        self.bytes = self.bytes.saturating_add(bytes.len() as u64);
        let mut rest = bytes;
        while let Some((&b, tail)) = rest.split_first() {
            rest = tail;
            // Inside a string nobody wants (the bulk of a huge argument), skip to the next
            // byte that can end it.
            if self.string && !self.escape && self.key.is_none() && self.capture.is_none() {
                let stop = rest.iter().position(|&c| c == b'"' || c == b'\\');
                if b != b'"' && b != b'\\' {
                    match stop {
                        Some(i) => {
                            self.byte(rest[i]);
                            rest = &rest[i + 1..];
                        }
                        None => rest = &[],
                    }
                    continue;
                }
            }
            self.byte(b);
        }
    }

    /// The line is over: end a bare value (`"id": 7` at the very end of a truncated line).
    pub(crate) fn finish(&mut self) {
        self.end_bare();
    }

    /// How many bytes were fed.
    pub(crate) fn bytes(&self) -> u64 {
        self.bytes
    }

    /// The deepest nesting of arrays and objects seen.
    pub(crate) fn depth_max(&self) -> u64 {
        self.depth_max
    }

    /// The fields recovered, each only if it is well-formed JSON of the type it must have.
    pub(crate) fn found(&self) -> Found {
        let parse = |text: &Option<Vec<u8>>| {
            text.as_deref()
                .and_then(|t| serde_json::from_slice::<Value>(t).ok())
        };
        let string = |text: &Option<Vec<u8>>| match parse(text) {
            Some(Value::String(s)) => Some(s),
            _ => None,
        };
        let id = parse(&self.id).filter(|id| id.is_string() || id.is_i64());
        Found {
            id,
            method: string(&self.method),
            tool: string(&self.tool),
        }
    }

    fn byte(&mut self, b: u8) {
        if self.string {
            if self.escape {
                self.escape = false;
                self.keep(b);
                return;
            }
            match b {
                b'\\' => {
                    self.escape = true;
                    if let Some(key) = &mut self.key {
                        key.other = true;
                    }
                    self.keep(b);
                }
                b'"' => {
                    self.string = false;
                    self.end_string();
                }
                _ => self.keep(b),
            }
            return;
        }
        match b {
            b' ' | b'\t' | b'\r' | b'\n' => self.end_bare(),
            b'"' => {
                self.string = true;
                self.begin_string();
            }
            b'{' | b'[' => {
                self.end_bare();
                self.begin_value(false, false);
                self.open(b == b'{');
            }
            b'}' | b']' => {
                self.end_bare();
                self.depth = self.depth.saturating_sub(1);
            }
            b':' => {
                self.end_bare();
                if let Some(frame) = self.frame()
                    && frame.expect == Expect::Colon
                {
                    frame.expect = Expect::Value;
                }
            }
            b',' => {
                self.end_bare();
                if let Some(frame) = self.frame() {
                    frame.expect = if frame.object {
                        Expect::Key
                    } else {
                        Expect::Value
                    };
                }
            }
            _ => {
                if self.capture.is_none() {
                    self.begin_value(true, false);
                }
                self.keep(b);
            }
        }
    }

    /// The frame of the innermost container, if it is at depth 1 or 2.
    fn frame(&mut self) -> Option<&mut Frame> {
        match self.depth {
            1 | 2 => self.frames.get_mut(self.depth as usize - 1),
            _ => None,
        }
    }

    fn open(&mut self, object: bool) {
        self.depth = self.depth.saturating_add(1);
        self.depth_max = self.depth_max.max(self.depth);
        let parent = match self.depth {
            2 => self.frames[0].key,
            _ => Key::Other,
        };
        if let Some(frame) = self.frame() {
            *frame = Frame {
                object,
                expect: if object { Expect::Key } else { Expect::Value },
                key: Key::Other,
                parent,
            };
        }
    }

    fn begin_string(&mut self) {
        if let Some(frame) = self.frame()
            && frame.object
            && frame.expect == Expect::Key
        {
            self.key = Some(KeyText::default());
            return;
        }
        self.begin_value(true, true);
        self.keep(b'"');
    }

    /// A value starts in the innermost container: capture it if it is a wanted scalar.
    fn begin_value(&mut self, scalar: bool, string: bool) {
        let depth = self.depth;
        let Some(frame) = self.frame() else { return };
        if frame.expect != Expect::Value {
            return;
        }
        frame.expect = Expect::Comma;
        if !frame.object || !scalar {
            return;
        }
        let field = match (depth, frame.parent, frame.key) {
            (1, _, Key::Id) => Field::Id,
            (1, _, Key::Method) => Field::Method,
            (2, Key::Params, Key::Name) => Field::Tool,
            _ => return,
        };
        self.capture = Some(Capture {
            field,
            text: Vec::new(),
            string,
            overflow: false,
        });
    }

    fn keep(&mut self, b: u8) {
        if let Some(key) = &mut self.key {
            match key.text.get_mut(key.len) {
                Some(slot) => {
                    *slot = b;
                    key.len += 1;
                }
                None => key.other = true,
            }
        } else if let Some(capture) = &mut self.capture {
            if capture.text.len() < FIELD_BYTES_MAX {
                capture.text.push(b);
            } else {
                capture.overflow = true;
            }
        }
    }

    fn end_string(&mut self) {
        if let Some(text) = self.key.take() {
            let key = match (text.other, &text.text[..text.len]) {
                (false, b"id") => Key::Id,
                (false, b"method") => Key::Method,
                (false, b"params") => Key::Params,
                (false, b"name") => Key::Name,
                _ => Key::Other,
            };
            if let Some(frame) = self.frame() {
                frame.key = key;
                frame.expect = Expect::Colon;
            }
        } else if self.capture.as_ref().is_some_and(|c| c.string) {
            self.keep(b'"');
            self.end_capture();
        }
    }

    fn end_bare(&mut self) {
        if self.capture.as_ref().is_some_and(|c| !c.string) {
            self.end_capture();
        }
    }

    fn end_capture(&mut self) {
        let Some(capture) = self.capture.take() else {
            return;
        };
        // A field too long to keep is no field at all; a later duplicate key wins, as it does
        // for serde_json.
        let text = (!capture.overflow).then_some(capture.text);
        match capture.field {
            Field::Id => self.id = text,
            Field::Method => self.method = text,
            Field::Tool => self.tool = text,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn scan(line: &[u8]) -> Found {
        let mut scan = Scan::default();
        scan.feed(line);
        scan.finish();
        scan.found()
    }

    #[test]
    fn the_top_level_id_is_recovered_and_nested_ones_are_not() {
        let huge = "x".repeat(1 << 20);
        let escaped = format!(
            r#"{{"jsonrpc":"2.0","method":"tools/call","params":{{"name":"write_file","arguments":{{"content":"{huge}\"}}, \"id\": 666 \\"}}}},"id":42}}"#
        );
        let cases: Vec<(&str, Vec<u8>, Option<Value>)> = vec![
            (
                "number",
                br#"{"jsonrpc":"2.0","id":7,"method":"ping"}"#.to_vec(),
                Some(json!(7)),
            ),
            ("negative number", br#"{"id":-3}"#.to_vec(), Some(json!(-3))),
            (
                "number at the end",
                br#"{"method":"ping","id":12}"#.to_vec(),
                Some(json!(12)),
            ),
            (
                "number before a space",
                br#"{ "id" : 12 , "x": 1}"#.to_vec(),
                Some(json!(12)),
            ),
            (
                "string with escaped quotes",
                br#"{"id":"a\"b\\\"c","method":"ping"}"#.to_vec(),
                Some(json!("a\"b\\\"c")),
            ),
            (
                "after a huge params value",
                escaped.into_bytes(),
                Some(json!(42)),
            ),
            (
                "nested id keys are not taken",
                br#"{"params":{"id":1,"arguments":{"id":2}},"result":[{"id":3}],"method":"x"}"#
                    .to_vec(),
                None,
            ),
            (
                "an id inside a string is not taken",
                br#"{"x":"\"id\":5"}"#.to_vec(),
                None,
            ),
            (
                "no id",
                br#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#.to_vec(),
                None,
            ),
            (
                "a fractional id is not an id",
                br#"{"id":1.5}"#.to_vec(),
                None,
            ),
            ("a null id is not an id", br#"{"id":null}"#.to_vec(), None),
            (
                "an object id is not an id",
                br#"{"id":{"id":1}}"#.to_vec(),
                None,
            ),
            ("not an object", br#"[{"id":1}]"#.to_vec(), None),
            (
                "not JSON after the id",
                br#"{"id":9, this is not json"#.to_vec(),
                Some(json!(9)),
            ),
            (
                "truncated after the id",
                br#"{"id":9"#.to_vec(),
                Some(json!(9)),
            ),
            (
                "invalid UTF-8 elsewhere",
                b"{\"id\":\"k\",\"x\":\"\xff\xfe\"}".to_vec(),
                Some(json!("k")),
            ),
            (
                "an escaped key is not recognised",
                br#"{"\u0069d":1}"#.to_vec(),
                None,
            ),
            (
                "a later duplicate wins",
                br#"{"id":1,"id":2}"#.to_vec(),
                Some(json!(2)),
            ),
            (
                "a too long id is dropped",
                format!(r#"{{"id":"{}"}}"#, "i".repeat(FIELD_BYTES_MAX)).into_bytes(),
                None,
            ),
        ];
        for (name, line, id) in cases {
            assert_eq!(scan(&line).id, id, "{name}");
            // Chunk boundaries change nothing.
            let mut bytewise = Scan::default();
            for b in &line {
                bytewise.feed(std::slice::from_ref(b));
            }
            bytewise.finish();
            assert_eq!(bytewise.found().id, id, "{name}, fed byte by byte");
        }
    }

    #[test]
    fn the_method_and_tool_are_recovered() {
        let found = scan(
            br#"{"params":{"arguments":{"name":"no","method":"no"},"name":"read_file"},"method":"tools/call","id":"r1"}"#,
        );
        assert_eq!(
            found,
            Found {
                id: Some(json!("r1")),
                method: Some("tools/call".into()),
                tool: Some("read_file".into()),
            }
        );
        // `name` counts only under `params`.
        assert_eq!(scan(br#"{"other":{"name":"x"}}"#).tool, None);
    }

    #[test]
    fn depth_and_bytes_are_counted_without_recursion() {
        let mut scan = Scan::default();
        let deep = 100_000;
        scan.feed(&vec![b'['; deep]);
        let string = br#""[[[[ not counted""#;
        scan.feed(string);
        scan.feed(&vec![b']'; deep]);
        scan.finish();
        assert_eq!(scan.depth_max(), deep as u64);
        assert_eq!(scan.bytes(), (2 * deep + string.len()) as u64);
    }
}
