//! Who made a request, as the client authentication ([`crate::auth`]) and
//! the OAuth validation (`oauth`) both name it: below both.

/// Who made a request: the name of the token it carried.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Principal(pub String);
