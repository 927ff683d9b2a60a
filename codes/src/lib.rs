//! Stable error codes, declared once per error enum, and the failure they become on the
//! wire. The bottom of the workspace: any crate may use it, it uses none of aido's.
//!
//! [`coded!`] writes an enum's `code()` and its `CODES` table from one list, so
//! the table cannot miss a code `code()` gives (like axum's `define_rejection!`). Variants
//! whose code comes from their fields (a denial carrying the policy's code) or from a guard
//! are written as `@delegate` arms, and the codes they can give are listed with `@also`. The
//! reference's list of codes (docs/REFERENCE.md) is checked against the union of every crate's `CODES` by a test.
//!
//! Every coded enum is also a [`Coded`], so any of them turns into the wire's [`Failure`] with
//! `.into()` (code, message and, where [`Coded::details`] gives them, details), and registers
//! its table in [`tables`] by itself: the code test reads the registry, not a hand list.

use serde::{Deserialize, Serialize};

/// Why an action did not succeed: a stable code, a sentence for people, optional details.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, thiserror::Error)]
#[error("{code}: {message}")]
pub struct Failure {
    /// Stable, snake_case, never reused (see each crate's code table).
    pub code: String,
    /// What happened, for people.
    pub message: String,
    /// Structured context (paths, sizes, limits).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub details: Option<serde_json::Value>,
}

impl Failure {
    /// A failure without details.
    pub fn new(code: &str, message: impl Into<String>) -> Self {
        Self {
            code: code.to_owned(),
            message: message.into(),
            details: None,
        }
    }

    /// Attach structured details.
    pub fn with_details(mut self, details: serde_json::Value) -> Self {
        self.details = Some(details);
        self
    }
}

/// An error with a stable code: what `coded!` declares. Any `Coded` error that displays turns
/// into a [`Failure`] with its code, its message and its details.
pub trait Coded {
    /// The stable code.
    fn code(&self) -> &'static str;
    /// Details the failure carries beside the message (none unless the enum names a function
    /// with `@details`).
    fn details(&self) -> Option<serde_json::Value> {
        None
    }
}

impl<T: Coded + std::fmt::Display> From<T> for Failure {
    fn from(e: T) -> Self {
        let failure = Failure::new(e.code(), e.to_string());
        match e.details() {
            Some(details) => failure.with_details(details),
            None => failure,
        }
    }
}

/// One coded enum's table, registered by `coded!` wherever the enum is declared.
#[derive(Debug)]
pub struct Table {
    /// The enum, as `module::path::Name`.
    pub name: &'static str,
    /// Every code it can give.
    pub codes: &'static [&'static str],
}

inventory::collect!(Table);

/// Every coded enum linked into this program, with its codes.
pub fn tables() -> impl Iterator<Item = &'static Table> {
    inventory::iter::<Table>.into_iter()
}

#[doc(hidden)]
pub use inventory;
#[doc(hidden)]
pub use serde_json::Value;

/// Declare an error enum's codes: `code()` and `CODES` from one table.
///
/// ```
/// #[derive(Debug)]
/// enum OpenError { Missing { path: String }, Busy }
/// aido_codes::coded!(OpenError {
///     Missing => "file_missing",
///     Busy => "file_busy",
/// });
/// assert_eq!(OpenError::Busy.code(), "file_busy");
/// assert_eq!(OpenError::CODES, &["file_missing", "file_busy"]);
/// ```
#[macro_export]
macro_rules! coded {
    ($ty:ident {
        $( @details $details:path; )?
        $( @delegate { $( $dpat:pat $( if $guard:expr )? => $dexpr:expr ),* $(,)? } )?
        $( @also [ $( $also:literal ),* $(,)? ] )?
        $( $variant:ident => $code:literal ),* $(,)?
    }) => {
        impl $ty {
            /// The stable code.
            pub fn code(&self) -> &'static str {
                #[allow(unreachable_patterns)]
                match self {
                    $( $( $dpat $( if $guard )? => $dexpr, )* )?
                    $( Self::$variant { .. } => $code, )*
                }
            }

            /// Every code this error can give.
            pub const CODES: &'static [&'static str] = &[ $( $code, )* $( $( $also, )* )? ];
        }

        impl $crate::Coded for $ty {
            fn code(&self) -> &'static str {
                $ty::code(self)
            }
            $(
                fn details(&self) -> Option<$crate::Value> {
                    $details(self)
                }
            )?
        }

        $crate::inventory::submit! {
            $crate::Table {
                name: concat!(module_path!(), "::", stringify!($ty)),
                codes: $ty::CODES,
            }
        }
    };
}
