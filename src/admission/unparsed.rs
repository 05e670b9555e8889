//! The values the schema check found unparseable (of the wrong type, or outside an enum), taken out of a copy of
//! the object so that the typed rules can still run on the rest; and the way back from the copy's list indexes
//! to the object's, so that every rule error names its item at the item's own index.

use crate::api::validation::{FieldPath, Step};
use serde_json::Value;
use std::collections::HashMap;

/// One step down the tree of removals: JSON names object fields and map keys alike.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
enum Key {
    Name(String),
    Index(usize),
}

impl From<Step<'_>> for Key {
    fn from(step: Step<'_>) -> Self {
        match step {
            Step::Name(name) => Key::Name(name.to_owned()),
            Step::Index(i) => Key::Index(i),
        }
    }
}

/// The removals at and below one value.
#[derive(Debug, Default)]
struct Node {
    /// The value itself is removed.
    removed: bool,
    children: HashMap<Key, Node>,
    /// For a list that lost items: the index, in the object, of each item the copy kept.
    kept: Option<Vec<usize>>,
    /// Whether the removals at or below this value may break a rule that the object itself does not: a field taken
    /// out of an object (a selector term left without its only field), or a list left empty. Taking a
    /// wrong-typed item out of a list that keeps others cannot: such an item has no field that a rule could
    /// find, and a rule broken by "any item" is broken by fewer items only less.
    misleads: bool,
}

/// The unparseable values of one object, as a tree of paths.
#[derive(Debug, Default)]
pub struct Unparsed {
    root: Node,
}

impl Unparsed {
    pub fn new<'a>(paths: impl IntoIterator<Item = &'a FieldPath>) -> Self {
        let mut root = Node::default();
        for path in paths {
            let node = path.steps().fold(&mut root, |node, step| {
                node.children.entry(Key::from(step)).or_default()
            });
            node.removed = true;
        }
        Unparsed { root }
    }

    pub fn is_empty(&self) -> bool {
        self.root.children.is_empty()
    }

    /// A copy of `object` without the unparseable values. Each list is pruned once, whatever the number of items
    /// it loses, and the indexes of the items it keeps are remembered for [`Unparsed::original`].
    pub fn remove_from(&mut self, object: &Value) -> Value {
        let mut copy = object.clone();
        self.root.prune(&mut copy);
        copy
    }

    /// Where `path`, a path in the copy, is in the object.
    pub fn original(&self, path: &FieldPath) -> FieldPath {
        let mut node = Some(&self.root);
        let mut indexes = Vec::new();
        for step in path.steps() {
            let key = match step {
                Step::Name(name) => Key::Name(name.to_owned()),
                Step::Index(i) => {
                    let kept = node.and_then(|n| n.kept.as_ref());
                    let original = kept.and_then(|kept| kept.get(i).copied()).unwrap_or(i);
                    indexes.push(original);
                    Key::Index(original)
                }
            };
            node = node.and_then(|n| n.children.get(&key));
        }
        path.reindexed(indexes)
    }

    /// Whether a rule error at `path` (a path in the object) may come from the removal rather than from the
    /// user: `path` lies above a removed field or a list the removal left empty.
    pub fn may_have_caused(&self, path: &FieldPath) -> bool {
        let mut node = &self.root;
        for step in path.steps() {
            match node.children.get(&Key::from(step)) {
                Some(child) => node = child,
                None => return false,
            }
        }
        node.misleads
    }
}

impl Node {
    fn prune(&mut self, value: &mut Value) {
        match value {
            Value::Object(fields) => {
                for (key, child) in &mut self.children {
                    let Key::Name(name) = key else { continue };
                    if child.removed {
                        self.misleads |= fields.remove(name).is_some();
                    } else if let Some(field) = fields.get_mut(name) {
                        child.prune(field);
                        self.misleads |= child.misleads;
                    }
                }
            }
            Value::Array(items) => {
                let mut any_removed = false;
                for (key, child) in &mut self.children {
                    let Key::Index(i) = key else { continue };
                    if child.removed {
                        any_removed = true;
                    } else if let Some(item) = items.get_mut(*i) {
                        child.prune(item);
                        self.misleads |= child.misleads;
                    }
                }
                if any_removed {
                    let is_removed = |i: usize| {
                        self.children
                            .get(&Key::Index(i))
                            .is_some_and(|child| child.removed)
                    };
                    let kept: Vec<usize> = (0..items.len()).filter(|i| !is_removed(*i)).collect();
                    let mut i = 0;
                    items.retain(|_| {
                        let keep = !is_removed(i);
                        i += 1;
                        keep
                    });
                    self.misleads |= kept.is_empty();
                    self.kept = Some(kept);
                }
            }
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn reqs() -> FieldPath {
        FieldPath::new("spec").child("requirements")
    }

    #[test]
    fn removes_items_and_maps_the_copys_indexes_back() {
        // Eleven items, [9] and [10] unparseable: sorting paths as text would put [10] before [9].
        let items: Vec<Value> = (0..12)
            .map(|i| match i {
                2 | 9 | 10 => json!(i),
                _ => json!({"key": i}),
            })
            .collect();
        let object = json!({"spec": {"requirements": items}});
        let removed: Vec<FieldPath> = [2, 9, 10].iter().map(|i| reqs().index(*i)).collect();
        let mut unparsed = Unparsed::new(&removed);
        let copy = unparsed.remove_from(&object);
        let keys: Vec<i64> = copy["spec"]["requirements"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|r| r["key"].as_i64())
            .collect();
        assert_eq!(keys, vec![0, 1, 3, 4, 5, 6, 7, 8, 11]);
        let at = |i: usize| unparsed.original(&reqs().index(i).child("key")).to_string();
        assert_eq!(at(0), "spec.requirements[0].key");
        assert_eq!(at(2), "spec.requirements[3].key");
        assert_eq!(at(8), "spec.requirements[11].key");
        // The list keeps items, so its own rules still speak of the user's items.
        assert!(!unparsed.may_have_caused(&reqs()));
        assert!(!unparsed.may_have_caused(&reqs().index(3)));
    }

    #[test]
    fn a_removed_field_or_an_emptied_list_may_cause_errors_above_it() {
        let terms = FieldPath::new("spec").child("terms");
        let object = json!({"spec": {"terms": [{"id": 5}], "other": [1]}, "more": [{"a": 1}]});
        let removed = [
            terms.index(0).child("id"),
            FieldPath::new("spec").child("other").index(0),
        ];
        let mut unparsed = Unparsed::new(&removed);
        let copy = unparsed.remove_from(&object);
        assert_eq!(
            copy,
            json!({"spec": {"terms": [{}], "other": []}, "more": [{"a": 1}]})
        );
        assert!(unparsed.may_have_caused(&terms));
        assert!(unparsed.may_have_caused(&terms.index(0)));
        assert!(unparsed.may_have_caused(&FieldPath::new("spec").child("other")));
        assert!(unparsed.may_have_caused(&FieldPath::new("spec")));
        assert!(!unparsed.may_have_caused(&FieldPath::new("more")));
    }

    #[test]
    fn nested_lists_map_back_level_by_level() {
        let object = json!({"spec": {"requirements": [5, {"values": ["a", 1, "b"]}]}});
        let removed = [reqs().index(0), reqs().index(1).child("values").index(1)];
        let mut unparsed = Unparsed::new(&removed);
        let copy = unparsed.remove_from(&object);
        assert_eq!(
            copy,
            json!({"spec": {"requirements": [{"values": ["a", "b"]}]}})
        );
        let in_copy = reqs().index(0).child("values").index(1);
        assert_eq!(
            unparsed.original(&in_copy).to_string(),
            "spec.requirements[1].values[2]"
        );
    }
}
