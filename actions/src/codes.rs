//! Stable error codes, declared once per error enum.
//!
//! [`coded!`](crate::coded) writes an enum's `code()` and its `CODES` table from one list, so
//! the table cannot miss a code `code()` gives (like axum's `define_rejection!`). Variants
//! whose code comes from their fields (a denial carrying the policy's code) or from a guard
//! are written as `@delegate` arms, and the codes they can give are listed with `@also`. The
//! reference's list of codes (docs/REFERENCE.md) is checked against the union of every crate's `CODES` by a test.

/// Declare an error enum's codes: `code()` and `CODES` from one table.
///
/// ```
/// #[derive(Debug)]
/// enum OpenError { Missing { path: String }, Busy }
/// aido_actions::coded!(OpenError {
///     Missing => "file_missing",
///     Busy => "file_busy",
/// });
/// assert_eq!(OpenError::Busy.code(), "file_busy");
/// assert_eq!(OpenError::CODES, &["file_missing", "file_busy"]);
/// ```
#[macro_export]
macro_rules! coded {
    ($ty:ident {
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
    };
}
