//! Code search for aido agents: `search_code` and `search_and_read`.
//! (placeholder docs, replaced below)
mod error;
mod judge;
mod lang;
mod pattern;
mod read;
mod request;
mod result;
mod search;
mod walk;

pub use error::{ReadError, SearchError};
pub use judge::{AllowAll, EntryKind, Judge, Verdict};
pub use lang::{DefinitionKind, FoundBy, Language};
pub use read::{
    Caller, Definition, Entry, Line, ReadRequest, ReadResult, TextCut, search_and_read,
};
pub use request::{Case, Limits, OutputMode, Scope, SearchRequest};
pub use result::{
    ContextLine, FileCount, FileHits, Hit, Output, SearchResult, Skipped, Truncation,
};
pub use search::{search_code, search_code_until};
