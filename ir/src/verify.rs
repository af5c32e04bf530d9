//! The verifier (placeholder, filled below).
use std::fmt;

/// One problem the verifier found, with where it is.
#[derive(Clone, Debug, PartialEq)]
pub struct VerifyError {
    pub location: String,
    pub message: String,
}

impl fmt::Display for VerifyError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.location, self.message)
    }
}

impl VerifyError {
    pub(crate) fn join(errors: &[VerifyError]) -> String {
        errors.iter().map(|e| format!("  {e}")).collect::<Vec<_>>().join("\n")
    }
}
