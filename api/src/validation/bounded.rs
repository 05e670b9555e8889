//! Bounds on what checking one object reports. Hostile input (thousands of wrong items in one list) must not
//! make the response, or the memory spent building it, grow with the input: past a cap errors are only
//! counted, and reported as one `... and <n> more errors in <path>`.

use super::{FieldError, FieldPath};
use std::collections::HashMap;

/// The most errors a response reports inside one list or map (the outermost one the error is in).
pub const MAX_ERRORS_PER_COLLECTION: usize = 10;
/// The most errors a response reports in all.
pub const MAX_ERRORS: usize = 100;

/// How many errors a [`BoundedErrors`] keeps.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ErrorCaps {
    pub per_collection: usize,
    pub total: usize,
}

impl ErrorCaps {
    /// What a response reports.
    pub const RESPONSE: ErrorCaps = ErrorCaps {
        per_collection: MAX_ERRORS_PER_COLLECTION,
        total: MAX_ERRORS,
    };
    /// What a check keeps before UPDATE ratcheting, which may drop many of them: ten times the response's caps,
    /// so that the errors a response reports are rarely among those left out this early.
    pub const CHECKING: ErrorCaps = ErrorCaps {
        per_collection: 10 * MAX_ERRORS_PER_COLLECTION,
        total: 10 * MAX_ERRORS,
    };
}

/// Errors, at most so many per collection and in all; those past a cap are counted by where they were.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BoundedErrors {
    caps: ErrorCaps,
    kept: Vec<FieldError>,
    per_collection: HashMap<FieldPath, usize>,
    /// How many errors were left out, by the collection they were in; the empty path is the whole object.
    omitted: HashMap<FieldPath, usize>,
    /// The keys of `omitted` in the order they were first used, so the summaries come out in a stable order.
    omitted_order: Vec<FieldPath>,
}

impl BoundedErrors {
    pub fn new(caps: ErrorCaps) -> Self {
        BoundedErrors {
            caps,
            kept: Vec::new(),
            per_collection: HashMap::new(),
            omitted: HashMap::new(),
            omitted_order: Vec::new(),
        }
    }

    /// Keeps `error` unless a cap is reached, else counts it.
    pub fn push(&mut self, error: FieldError) {
        if self.kept.len() >= self.caps.total {
            return self.omit(&FieldPath::default(), 1);
        }
        if let Some(collection) = error.path.collection() {
            let count = self.per_collection.entry(collection.clone()).or_default();
            if *count >= self.caps.per_collection {
                return self.omit(&collection, 1);
            }
            *count += 1;
        }
        self.kept.push(error);
    }

    /// Whether an error inside `collection` would only be counted: the caller may then skip building it and
    /// call [`BoundedErrors::count_in`], which keeps a hostile list's excess items cheap.
    pub fn is_full(&self, collection: &FieldPath) -> bool {
        self.kept.len() >= self.caps.total
            || self
                .per_collection
                .get(collection)
                .is_some_and(|count| *count >= self.caps.per_collection)
    }

    /// Counts one error inside a `collection` that [`BoundedErrors::is_full`], where [`BoundedErrors::push`] would.
    pub fn count_in(&mut self, collection: &FieldPath) {
        if self.kept.len() >= self.caps.total {
            self.omit(&FieldPath::default(), 1);
        } else {
            self.omit(collection, 1);
        }
    }

    /// Counts `count` errors in `collection` (the empty path for the whole object) as left out.
    pub fn omit(&mut self, collection: &FieldPath, count: usize) {
        if count == 0 {
            return;
        }
        match self.omitted.get_mut(collection) {
            Some(n) => *n += count,
            None => {
                self.omitted.insert(collection.clone(), count);
                self.omitted_order.push(collection.clone());
            }
        }
    }

    /// Whether no error was kept or counted.
    pub fn is_empty(&self) -> bool {
        self.kept.is_empty() && self.omitted.is_empty()
    }

    /// The errors kept, then one summary per place where some were left out.
    pub fn into_errors(self) -> Vec<FieldError> {
        let BoundedErrors {
            mut kept,
            mut omitted,
            omitted_order,
            ..
        } = self;
        for path in omitted_order {
            if let Some(count) = omitted.remove(&path) {
                kept.push(FieldError::omitted(&path, count));
            }
        }
        kept
    }

    /// The errors kept and the counts of those left out, to carry into another list.
    pub fn into_parts(self) -> (Vec<FieldError>, Vec<(FieldPath, usize)>) {
        let BoundedErrors {
            kept,
            mut omitted,
            omitted_order,
            ..
        } = self;
        let counts = omitted_order
            .into_iter()
            .filter_map(|path| omitted.remove(&path).map(|count| (path, count)))
            .collect();
        (kept, counts)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn caps_each_collection_and_the_total() {
        let caps = ErrorCaps {
            per_collection: 2,
            total: 5,
        };
        let mut errors = BoundedErrors::new(caps);
        let reqs = FieldPath::new("spec").child("requirements");
        for i in 0..4 {
            errors.push(FieldError::required(&reqs.index(i).child("key")));
        }
        let weight = FieldPath::new("spec").child("weight");
        for _ in 0..5 {
            errors.push(FieldError::required(&weight));
        }
        let rendered: Vec<String> = errors
            .into_errors()
            .iter()
            .map(ToString::to_string)
            .collect();
        assert_eq!(
            rendered,
            vec![
                "spec.requirements[0].key: Required value",
                "spec.requirements[1].key: Required value",
                "spec.weight: Required value",
                "spec.weight: Required value",
                "spec.weight: Required value",
                "... and 2 more errors in spec.requirements",
                "... and 2 more errors",
            ]
        );
    }
}
