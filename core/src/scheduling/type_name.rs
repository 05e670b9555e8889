//! An instance type's name as a planned claim lists it: shared, so that thousands of claims listing the same
//! hundreds of types hold one copy of each name.

use std::borrow::Borrow;
use std::fmt;
use std::ops::Deref;
use std::sync::Arc;

/// An instance-type name, cheap to clone; reads as a `str`.
#[derive(Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct TypeName(Arc<str>);

impl TypeName {
    pub fn new(name: &str) -> Self {
        TypeName(Arc::from(name))
    }
}

impl Deref for TypeName {
    type Target = str;

    fn deref(&self) -> &str {
        &self.0
    }
}

/// Lets a list of names be joined as text, as a `Vec<String>` could.
impl Borrow<str> for TypeName {
    fn borrow(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for TypeName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// As the name's text, so that plans print as they did with `String` names.
impl fmt::Debug for TypeName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&*self.0, f)
    }
}

impl PartialEq<str> for TypeName {
    fn eq(&self, other: &str) -> bool {
        *self.0 == *other
    }
}

impl PartialEq<&str> for TypeName {
    fn eq(&self, other: &&str) -> bool {
        *self.0 == **other
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_and_compares_as_its_text() {
        let name = TypeName::new("m5.large");
        assert_eq!(name, "m5.large");
        assert_ne!(name, "m5.xlarge");
        assert_eq!(format!("{name} {name:?}"), r#"m5.large "m5.large""#);
        assert_eq!(name.len(), 8);
        assert_eq!([name.clone(), name].join(","), "m5.large,m5.large");
    }
}
