//! The NodeClaims this process created and has not yet tried to launch. No instance can carry such a claim's
//! name, so its first launch skips the adoption check (listing every instance of the cluster) and the fresh
//! read of the claim: the two calls that stood between a claim's creation and its CreateFleet call.
//!
//! The watch can deliver a new claim before its create call has returned, so a name is noted before the call
//! and its UID once the call returns; a launch that finds the call still out waits for it. Only a claim whose
//! UID the create call returned skips the check, and only once: a retry after a failure (which may have come
//! after CreateFleet was sent) looks for an instance again, and a claim created before a restart, or by a call
//! that failed or timed out, was never ours to skip.

use std::collections::HashMap;
use std::sync::{Mutex, MutexGuard};

/// What a launch may skip.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FirstLaunch {
    /// Created by this process, never tried: nothing to adopt.
    Yes,
    /// This process's create call for the name has not returned yet: ask again shortly.
    Wait,
    /// Anything else: look for an instance first.
    No,
}

#[derive(Debug)]
enum Entry {
    Creating,
    Created { uid: String },
}

/// Entries by claim name.
#[derive(Debug, Default)]
pub struct CreatedHere {
    claims: Mutex<HashMap<String, Entry>>,
}

impl CreatedHere {
    /// Notes that a create call for `name` is about to be made.
    pub fn creating(&self, name: &str) {
        self.lock().insert(name.to_owned(), Entry::Creating);
    }

    /// Notes the UID the create call for `name` returned.
    pub fn created(&self, name: &str, uid: &str) {
        let uid = uid.to_owned();
        self.lock().insert(name.to_owned(), Entry::Created { uid });
    }

    /// Forgets `name`: its create call failed, or the claim is going away.
    pub fn forget(&self, name: &str) {
        self.lock().remove(name);
    }

    /// Whether the claim `name` with `uid` is launched for the first time; from then on it is not.
    pub fn first_launch(&self, name: &str, uid: &str) -> FirstLaunch {
        let mut claims = self.lock();
        match claims.get(name) {
            Some(Entry::Creating) => FirstLaunch::Wait,
            Some(Entry::Created { uid: created }) if created == uid => {
                claims.remove(name);
                FirstLaunch::Yes
            }
            Some(Entry::Created { .. }) | None => FirstLaunch::No,
        }
    }

    fn lock(&self) -> MutexGuard<'_, HashMap<String, Entry>> {
        // Every update is a single insert or remove: a panic elsewhere leaves the map whole.
        self.claims.lock().unwrap_or_else(|p| p.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use super::{CreatedHere, FirstLaunch};

    #[test]
    fn a_claim_created_here_skips_the_check_once() {
        let created = CreatedHere::default();
        created.creating("a");
        assert_eq!(created.first_launch("a", "uid-1"), FirstLaunch::Wait);
        created.created("a", "uid-1");
        assert_eq!(created.first_launch("a", "uid-1"), FirstLaunch::Yes);
        assert_eq!(
            created.first_launch("a", "uid-1"),
            FirstLaunch::No,
            "a retry must look for an instance"
        );
    }

    #[test]
    fn other_claims_of_the_name_and_failed_creates_are_checked() {
        let created = CreatedHere::default();
        assert_eq!(created.first_launch("a", "uid-1"), FirstLaunch::No);
        created.creating("a");
        created.created("a", "uid-2");
        assert_eq!(
            created.first_launch("a", "uid-1"),
            FirstLaunch::No,
            "a claim of the same name from before a restart"
        );
        created.creating("b");
        created.forget("b");
        assert_eq!(created.first_launch("b", "uid-3"), FirstLaunch::No);
    }
}
