//! What each operation answers: plain serde types, so a body can journal them and play them
//! back without a browser.

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

/// Where a tab is after a navigation (open, navigate, back, forward).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Navigated {
    /// The tab.
    pub tab: String,
    /// The page's URL after the load.
    pub url: String,
    /// Its title.
    pub title: String,
    /// False when back or forward had no entry to go to (the tab did not move).
    pub moved: bool,
}

/// One tab.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TabInfo {
    /// Its id (the DevTools target id).
    pub id: String,
    /// Its URL.
    pub url: String,
    /// Its title.
    pub title: String,
    /// Whether it is the tab operations act on.
    pub current: bool,
}

/// An element, named by a snapshot's reference or by a CSS selector.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "by", content = "value", rename_all = "snake_case")]
pub enum Locator {
    /// A reference from the last snapshot (`e12`).
    Ref(String),
    /// A CSS selector (`form#login button`).
    Css(String),
}

/// Where a click landed, in CSS pixels of the viewport.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Clicked {
    /// x.
    pub x: f64,
    /// y.
    pub y: f64,
}

/// The page's scroll position after a scroll.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Scrolled {
    /// Horizontal offset.
    pub x: f64,
    /// Vertical offset.
    pub y: f64,
}

/// A field's value after `fill` or `select`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Filled {
    /// The field's reference.
    #[serde(rename = "ref")]
    pub reference: String,
    /// Its value now (a select's chosen option value).
    pub value: String,
}

/// A wait that ended with what it waited for.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Found {
    /// How long it took.
    pub elapsed_ms: u64,
}

/// The page as an accessibility tree, flattened in document order.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Snapshot {
    /// The page's URL.
    pub url: String,
    /// Its title.
    pub title: String,
    /// The nodes, parents before children; `depth` gives the nesting.
    pub nodes: Vec<Node>,
    /// Whether nodes were left out for the bound.
    pub truncated: bool,
}

/// One accessibility node.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Node {
    /// The element's reference for click, fill, select and wait_for (`e12`); stable while the
    /// element stays in the page. `None` for nodes with no DOM element.
    #[serde(rename = "ref", skip_serializing_if = "Option::is_none", default)]
    pub reference: Option<String>,
    /// The ARIA role (`textbox`, `button`, `link`, `heading`).
    pub role: String,
    /// The accessible name (a label, the text of a link).
    pub name: String,
    /// The value (a field's text, a slider's number).
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub value: Option<String>,
    /// Nesting below the root.
    pub depth: u32,
    /// States that hold (`focused`, `disabled`, `checked`, `required`, `expanded`, ...).
    #[serde(skip_serializing_if = "Vec::is_empty", default)]
    pub states: Vec<String>,
}

/// The page's visible text.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PageText {
    /// The page's URL.
    pub url: String,
    /// Its visible text (`innerText` of the body).
    pub text: String,
    /// Whether the text was cut at the bound.
    pub truncated: bool,
}

/// A PNG of the viewport.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Screenshot {
    /// The PNG's bytes (base64 in JSON).
    #[serde(with = "base64_bytes")]
    pub png: Vec<u8>,
    /// Its width in pixels.
    pub width: u32,
    /// Its height.
    pub height: u32,
}

/// A finished download.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Download {
    /// Chromium's id for it; the file's name in the download directory.
    pub guid: String,
    /// Where it came from.
    pub url: String,
    /// The name the server suggested (never used as a path).
    pub suggested_filename: String,
    /// The file.
    pub path: PathBuf,
    /// Its size.
    pub bytes: u64,
}

/// What a script returned (its JSON value; `null` for undefined).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Evaluated {
    /// The value.
    pub value: serde_json::Value,
}

mod base64_bytes {
    use base64::Engine as _;
    use base64::engine::general_purpose::STANDARD;
    use serde::{Deserialize, Deserializer, Serializer};

    pub(super) fn serialize<S: Serializer>(bytes: &[u8], serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(&STANDARD.encode(bytes))
    }

    pub(super) fn deserialize<'de, D: Deserializer<'de>>(
        deserializer: D,
    ) -> Result<Vec<u8>, D::Error> {
        let text = String::deserialize(deserializer)?;
        STANDARD.decode(text).map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn answers_round_trip_as_json() {
        let shot = Screenshot {
            png: vec![0x89, b'P', b'N', b'G'],
            width: 2,
            height: 1,
        };
        let json = serde_json::to_value(&shot).unwrap();
        assert_eq!(json["png"], "iVBORw==");
        assert_eq!(serde_json::from_value::<Screenshot>(json).unwrap(), shot);
        let node = Node {
            reference: Some("e7".into()),
            role: "textbox".into(),
            name: "User".into(),
            value: None,
            depth: 2,
            states: vec![],
        };
        let json = serde_json::to_value(&node).unwrap();
        assert_eq!(json["ref"], "e7");
        assert!(json.get("value").is_none());
        assert_eq!(serde_json::from_value::<Node>(json).unwrap(), node);
        let locator = serde_json::to_value(Locator::Css("#a".into())).unwrap();
        assert_eq!(locator, serde_json::json!({"by": "css", "value": "#a"}));
    }
}
