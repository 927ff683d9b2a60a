use std::path::PathBuf;

/// Why an artifact operation failed. Each variant has a stable code ([`ArtifactError::code`]).
#[derive(Debug, thiserror::Error)]
pub enum ArtifactError {
    /// No artifact has this id (or the id is not 32 lowercase hex digits).
    #[error("no artifact has the id {id:?}")]
    NotFound {
        /// The id asked for.
        id: String,
    },
    /// A file name inside an artifact is not a plain relative name (segments of letters,
    /// digits, `.`, `_` and `-`, none starting with a dot, at most 8 deep and 255 bytes).
    #[error("the artifact file name {name:?} is refused: {why}")]
    NameInvalid {
        /// The name as given.
        name: String,
        /// What is wrong with it.
        why: &'static str,
    },
    /// A file, an artifact or all artifacts together would pass a size cap, or an artifact
    /// would hold too many files, or the store too many artifacts.
    #[error("{what} would be {size}, over the cap of {max}")]
    TooLarge {
        /// Which cap.
        what: &'static str,
        /// What it would be.
        size: u64,
        /// The cap.
        max: u64,
    },
    /// The entry page is not one of the artifact's files.
    #[error("the entry {entry:?} is not one of the artifact's files")]
    EntryMissing {
        /// The entry asked for.
        entry: String,
    },
    /// A stored file or manifest does not match what was recorded (its blake3 or id).
    #[error("artifact {id} is damaged: {why}")]
    Corrupt {
        /// The artifact.
        id: String,
        /// What does not match.
        why: String,
    },
    /// The store's directory could not be read or written.
    #[error("the artifact store failed at {}: {source}", path.display())]
    Io {
        /// Where.
        path: PathBuf,
        /// What the system said.
        source: std::io::Error,
    },
    /// The listener could not bind its address.
    #[error("the artifact server cannot listen on 127.0.0.1:{port}: {source}")]
    ListenFailed {
        /// The port asked for (0: any).
        port: u16,
        /// What the system said.
        source: std::io::Error,
    },
}

impl ArtifactError {
    pub(crate) fn io(path: &std::path::Path, source: std::io::Error) -> Self {
        Self::Io {
            path: path.to_owned(),
            source,
        }
    }
}

aido_codes::coded!(ArtifactError {
    NotFound => "artifact_not_found",
    NameInvalid => "artifact_name_invalid",
    TooLarge => "artifact_too_large",
    EntryMissing => "artifact_entry_missing",
    Corrupt => "artifact_corrupt",
    Io => "artifact_store_failed",
    ListenFailed => "artifact_listen_failed",
});

#[cfg(test)]
mod tests {
    use super::*;

    /// The table lists every variant's code once.
    #[test]
    fn codes_are_the_table() {
        let errors = [
            ArtifactError::NotFound { id: String::new() },
            ArtifactError::NameInvalid {
                name: String::new(),
                why: "",
            },
            ArtifactError::TooLarge {
                what: "",
                size: 0,
                max: 0,
            },
            ArtifactError::EntryMissing {
                entry: String::new(),
            },
            ArtifactError::Corrupt {
                id: String::new(),
                why: String::new(),
            },
            ArtifactError::io(std::path::Path::new("/"), std::io::Error::other("x")),
            ArtifactError::ListenFailed {
                port: 0,
                source: std::io::Error::other("x"),
            },
        ];
        let codes: Vec<_> = errors.iter().map(ArtifactError::code).collect();
        assert_eq!(codes, ArtifactError::CODES);
    }
}
