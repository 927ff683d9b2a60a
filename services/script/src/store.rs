//! The definitions store: one JSON file per definition in `AIDO_HOME/scripts`, written to a
//! temporary file, fsynced and renamed, so every aido process of that home sees a definition
//! whole or not at all, and a restart finds them all. Each file holds the source and its
//! blake3; a file whose hash is not its source's is refused on read.

use std::path::{Path, PathBuf};

use aido_actions::script::{DefinitionKind, Object};
use serde::{Deserialize, Serialize};

use super::error::ScriptError;

/// Most definitions one AIDO_HOME holds.
pub const DEFINITIONS_MAX: usize = 256;
/// Largest definition file read back, in bytes (source, schema and description with room).
const FILE_BYTES_MAX: u64 = 256 * 1024;
/// The file format's version.
const FORMAT: u32 = 1;

/// One definition as stored.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Definition {
    /// The format version.
    pub v: u32,
    /// Its name (the file's stem and its MCP tool's name).
    pub name: String,
    /// Function or custom primitive.
    pub kind: DefinitionKind,
    /// What it does.
    pub description: String,
    /// A custom primitive's argument schema (`None` for a function).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub input_schema: Option<Object>,
    /// The Rhai source.
    pub source: String,
    /// blake3 of the source (hex).
    pub hash: String,
    /// The session that defined it.
    pub session: String,
    /// The seq of the define's proposal.
    pub proposal: u64,
}

impl Definition {
    /// The blake3 (hex) of a source.
    pub fn hash_of(source: &str) -> String {
        blake3::hash(source.as_bytes()).to_hex().to_string()
    }

    /// As a listing shows it (with the source when asked).
    pub fn listed(&self, source: bool) -> serde_json::Value {
        let mut v = serde_json::json!({
            "name": self.name,
            "kind": self.kind.name(),
            "description": self.description,
            "hash": self.hash,
            "defined_by": {"session": self.session, "seq": self.proposal},
        });
        if let Some(schema) = &self.input_schema {
            v["input_schema"] = serde_json::Value::Object(schema.clone());
        }
        if source {
            v["source"] = serde_json::json!(self.source);
        }
        v
    }
}

/// The store at a directory.
pub struct Store {
    dir: PathBuf,
}

impl Store {
    /// The store in `dir` (created on the first definition).
    pub fn new(dir: &Path) -> Self {
        Self {
            dir: dir.to_owned(),
        }
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.join(format!("{name}.json"))
    }

    /// The definition named `name`, of any kind. Names are checked before they reach here,
    /// so a name never leaves the directory.
    pub fn get(&self, name: &str) -> Result<Option<Definition>, ScriptError> {
        let path = self.path(name);
        let bytes = match read_bounded(&path) {
            Ok(b) => b,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(store(&path, e)),
        };
        let def: Definition =
            serde_json::from_slice(&bytes).map_err(|e| ScriptError::StoreCorrupt {
                name: name.to_owned(),
                why: e.to_string(),
            })?;
        let corrupt = |why: String| ScriptError::StoreCorrupt {
            name: name.to_owned(),
            why,
        };
        if def.v != FORMAT {
            return Err(corrupt(format!(
                "format {} (this aido reads {FORMAT})",
                def.v
            )));
        }
        if def.name != name {
            return Err(corrupt(format!("the file holds {:?}", def.name)));
        }
        if Definition::hash_of(&def.source) != def.hash {
            return Err(corrupt(
                "its source does not hash to its recorded hash".into(),
            ));
        }
        Ok(Some(def))
    }

    /// Every definition, by name. A damaged file is an error, never skipped.
    pub fn all(&self) -> Result<Vec<Definition>, ScriptError> {
        let entries = match std::fs::read_dir(&self.dir) {
            Ok(e) => e,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) => return Err(store(&self.dir, e)),
        };
        let mut names = Vec::new();
        for entry in entries {
            let entry = entry.map_err(|e| store(&self.dir, e))?;
            let file = entry.file_name();
            let Some(name) = file.to_str().and_then(|f| f.strip_suffix(".json")) else {
                continue;
            };
            if super::name_ok(name) {
                names.push(name.to_owned());
            }
        }
        names.sort();
        let mut out = Vec::with_capacity(names.len());
        for name in names {
            if let Some(def) = self.get(&name)? {
                out.push(def);
            }
        }
        Ok(out)
    }

    /// Store a definition, replacing one of the same name and kind; whether it replaced one.
    pub fn put(&self, def: &Definition) -> Result<bool, ScriptError> {
        let replaced = match self.get(&def.name)? {
            Some(old) if old.kind != def.kind => {
                return Err(ScriptError::NameTaken {
                    name: def.name.clone(),
                    kind: old.kind.name(),
                });
            }
            Some(_) => true,
            None => {
                if self.all()?.len() >= DEFINITIONS_MAX {
                    return Err(ScriptError::TooMany {
                        max: DEFINITIONS_MAX,
                    });
                }
                false
            }
        };
        std::fs::create_dir_all(&self.dir).map_err(|e| store(&self.dir, e))?;
        let bytes = serde_json::to_vec_pretty(def)
            .map_err(|e| ScriptError::Store { why: e.to_string() })?;
        let target = self.path(&def.name);
        let temp = self.dir.join(format!(".{}.tmp", def.name));
        write_synced(&temp, &bytes).map_err(|e| store(&temp, e))?;
        std::fs::rename(&temp, &target).map_err(|e| store(&target, e))?;
        if let Ok(dir) = std::fs::File::open(&self.dir) {
            let _ = dir.sync_all();
        }
        Ok(replaced)
    }

    /// Delete the definition `name` of `kind`; what it was.
    pub fn delete(&self, name: &str, kind: DefinitionKind) -> Result<Definition, ScriptError> {
        let def = match self.get(name)? {
            Some(d) if d.kind == kind => d,
            _ => {
                return Err(ScriptError::NotFound {
                    name: name.to_owned(),
                    kind: kind.name(),
                });
            }
        };
        let path = self.path(name);
        std::fs::remove_file(&path).map_err(|e| store(&path, e))?;
        Ok(def)
    }
}

fn store(path: &Path, e: std::io::Error) -> ScriptError {
    ScriptError::Store {
        why: format!("{}: {e}", path.display()),
    }
}

fn read_bounded(path: &Path) -> std::io::Result<Vec<u8>> {
    use std::io::Read;
    let file = std::fs::File::open(path)?;
    let mut bytes = Vec::new();
    file.take(FILE_BYTES_MAX + 1).read_to_end(&mut bytes)?;
    if bytes.len() as u64 > FILE_BYTES_MAX {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            format!("over {FILE_BYTES_MAX} bytes"),
        ));
    }
    Ok(bytes)
}

fn write_synced(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    use std::io::Write;
    let mut file = std::fs::File::create(path)?;
    file.write_all(bytes)?;
    file.sync_all()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn def(name: &str, kind: DefinitionKind, source: &str) -> Definition {
        Definition {
            v: FORMAT,
            name: name.into(),
            kind,
            description: String::new(),
            input_schema: None,
            source: source.into(),
            hash: Definition::hash_of(source),
            session: "s".into(),
            proposal: 1,
        }
    }

    #[test]
    fn definitions_survive_a_new_store_and_a_damaged_one_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::new(&dir.path().join("scripts"));
        assert!(!store.put(&def("a", DefinitionKind::Function, "1")).unwrap());
        assert!(store.put(&def("a", DefinitionKind::Function, "2")).unwrap());
        let err = store
            .put(&def("a", DefinitionKind::Primitive, "3"))
            .unwrap_err();
        assert_eq!(err.code(), "script_name_taken");
        // A new store over the same directory (a restart) finds it.
        let again = Store::new(&dir.path().join("scripts"));
        assert_eq!(again.get("a").unwrap().unwrap().source, "2");
        assert_eq!(again.all().unwrap().len(), 1);
        // A source changed behind aido's back no longer matches its hash.
        let path = dir.path().join("scripts/a.json");
        let text = std::fs::read_to_string(&path).unwrap();
        std::fs::write(
            &path,
            text.replace("\"source\": \"2\"", "\"source\": \"3\""),
        )
        .unwrap();
        assert_eq!(again.get("a").unwrap_err().code(), "script_store_corrupt");
        let err = again.delete("b", DefinitionKind::Function).unwrap_err();
        assert_eq!(err.code(), "script_not_found");
    }
}
