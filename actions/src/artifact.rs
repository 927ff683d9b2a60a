//! Artifact primitives: pages and small web apps the agent made, kept in
//! `AIDO_HOME/artifacts/<id>/` and served on 127.0.0.1 for a person to open (the artifact body
//! runs them on aido-artifacts).
//!
//! A file comes inline (`content`, UTF-8 or base64) or is copied from a path the walls allow
//! (`from`, judged as a read by the policy before anything runs). `artifact_save` copies an
//! artifact out to a directory the walls allow, as journaled file writes, so a rewind undoes it.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::access::{Access, Touches};
use crate::fs::Encoding;

/// One file of a new artifact: its name inside the artifact, and either its contents or the
/// path it is copied from.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ArtifactFile {
    /// Its name inside the artifact (`index.html`, `js/app.js`): segments of letters, digits,
    /// `.`, `_` and `-`, none starting with a dot, at most 8 deep.
    #[schemars(length(min = 1, max = 255))]
    pub name: String,
    /// Its contents (UTF-8 text, or base64 when `encoding` is `base64`). Give this or `from`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub content: Option<String>,
    /// `utf8` (default) or `base64`, for `content`.
    #[serde(default)]
    pub encoding: Encoding,
    /// A file to copy it from, as read_file would name it (judged by the walls). Give this
    /// or `content`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub from: Option<String>,
}

/// Make an artifact from files (an HTML page, a canvas, a small web app). Its id (128 random
/// bits) is the answer; nothing is served until artifact_serve.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ArtifactCreate {
    /// Its files (1 to 256).
    #[schemars(length(min = 1, max = 256))]
    pub files: Vec<ArtifactFile>,
    /// A title for people (at most 200 bytes).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 200))]
    pub title: Option<String>,
    /// The page `/a/<id>/` serves; default `index.html`, else the first `.html` file.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub entry: Option<String>,
}

/// No arguments.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ArtifactList {}

/// Serve an artifact on 127.0.0.1 under `/a/<id>/` for a while; the answer says the URL.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ArtifactServe {
    /// The artifact's id.
    #[schemars(length(min = 32, max = 32))]
    pub id: String,
    /// How long it is served, in milliseconds (default and cap from `[artifacts]`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ttl_ms: Option<u64>,
    /// Origins the page's fetch() may reach (`https://api.example.com`), each judged by
    /// `[net] allow`; empty (the default): none at all.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 16))]
    pub connect: Vec<String>,
}

/// Copy an artifact's files into a directory the walls allow (`to/<name>`), as journaled
/// file writes: a rewind undoes them.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ArtifactSave {
    /// The artifact's id.
    #[schemars(length(min = 32, max = 32))]
    pub id: String,
    /// The directory to write its files into (created when missing).
    pub to: String,
}

/// An artifact, by id.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ArtifactTarget {
    /// The artifact's id.
    #[schemars(length(min = 32, max = 32))]
    pub id: String,
}

impl ArtifactSave {
    /// Where file `name` of the artifact goes.
    pub fn target(&self, name: &str) -> String {
        format!("{}/{name}", self.to.trim_end_matches('/'))
    }
}

impl Touches for ArtifactCreate {
    fn touches(&self, out: &mut Vec<Access>) {
        out.extend(
            self.files
                .iter()
                .filter_map(|f| f.from.as_deref())
                .map(Access::read),
        );
    }
}

impl Touches for ArtifactSave {
    fn touches(&self, out: &mut Vec<Access>) {
        out.push(Access::write(&self.to));
    }
}

// The store is in AIDO_HOME and the listener on loopback: these touch no path of the agent's.
impl Touches for ArtifactList {
    fn touches(&self, _out: &mut Vec<Access>) {}
}
impl Touches for ArtifactServe {
    fn touches(&self, _out: &mut Vec<Access>) {}
}
impl Touches for ArtifactTarget {
    fn touches(&self, _out: &mut Vec<Access>) {}
}
