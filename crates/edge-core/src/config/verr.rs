//! The error of the semantic checks: the span of the offending value (when known), the
//! dotted key and the message; `load` turns it into `file:line: key: message`.

use std::ops::Range;

pub(super) struct VErr {
    pub span: Option<Range<usize>>,
    pub key: String,
    pub message: String,
}

pub(super) fn err<T>(
    span: Option<Range<usize>>,
    key: &str,
    message: impl Into<String>,
) -> Result<T, VErr> {
    Err(VErr {
        span: span.filter(|s| s.end > 0),
        key: key.into(),
        message: message.into(),
    })
}
