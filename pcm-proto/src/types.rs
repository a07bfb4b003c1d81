//! Self-checking newtypes: a value of these types is valid by construction, on both sides
//! of the wire (deserialisation goes through the same checks).

use std::fmt;
use std::sync::Arc;

use serde::{Deserialize, Serialize};

/// A name that failed validation, with the reason.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid {what} {value:?}: {reason}")]
pub struct InvalidName {
    /// Which kind of name.
    pub what: &'static str,
    /// The offending value (cut to 80 characters).
    pub value: String,
    /// What is wrong with it.
    pub reason: &'static str,
}

fn check(
    what: &'static str,
    value: &str,
    max: usize,
    allowed: fn(char) -> bool,
) -> Result<(), InvalidName> {
    let fail = |reason| InvalidName {
        what,
        value: value.chars().take(80).collect(),
        reason,
    };
    if value.is_empty() {
        return Err(fail("must not be empty"));
    }
    if value.len() > max {
        return Err(fail("too long"));
    }
    if !value.chars().all(allowed) {
        return Err(fail(
            "has characters other than letters, digits, '.', '-' and '_'",
        ));
    }
    Ok(())
}

fn name_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '_')
}

macro_rules! checked_name {
    ($(#[$doc:meta])* $name:ident, $what:literal, $max:expr) => {
        $(#[$doc])*
        ///
        /// Shared, not copied, when cloned: agents and the simulator pass names around with
        /// every message and profile (at 10,000 simulated nodes, copying them took about a
        /// sixth of the simulator's time).
        #[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
        #[serde(try_from = "String", into = "String")]
        pub struct $name(Arc<str>);

        impl $name {
            /// Validates and wraps a name.
            pub fn new(value: impl Into<String>) -> Result<Self, InvalidName> {
                let value = value.into();
                check($what, &value, $max, name_char)?;
                Ok(Self(Arc::from(value)))
            }

            /// The name as a string.
            pub fn as_str(&self) -> &str {
                &self.0
            }
        }

        impl TryFrom<String> for $name {
            type Error = InvalidName;
            fn try_from(value: String) -> Result<Self, InvalidName> {
                Self::new(value)
            }
        }

        impl From<$name> for String {
            fn from(value: $name) -> String {
                value.0.to_string()
            }
        }

        impl std::str::FromStr for $name {
            type Err = InvalidName;
            fn from_str(s: &str) -> Result<Self, InvalidName> {
                Self::new(s)
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(&self.0)
            }
        }
    };
}

checked_name!(
    /// Host name of a node, as the MPI runtime and `gethostname` know it (at most 255 bytes).
    HostName,
    "host name",
    255
);
checked_name!(
    /// Identifier of one run of a PCM application, chosen by its rank 0 at start (at most 64 bytes).
    JobId,
    "job id",
    64
);
checked_name!(
    /// Name an application gives itself in `Pcm::init` (at most 64 bytes).
    AppName,
    "application name",
    64
);

/// A rank number in a job's world communicator.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct Rank(pub u32);

impl fmt::Display for Rank {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_checked() {
        assert!(HostName::new("node-1.example").is_ok());
        assert!(HostName::new("").is_err());
        assert!(HostName::new("a b").is_err());
        assert!(JobId::new("x".repeat(65)).is_err());
        let err = AppName::new("heat;rm").unwrap_err();
        assert!(err.to_string().contains("application name"));
    }
}
