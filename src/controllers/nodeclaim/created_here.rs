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
use std::time::Duration;

/// While this process's create call for the claim has not returned (the watch can be faster).
const CREATE_CALL_RECHECK: Duration = Duration::from_millis(10);
/// While this process is launching the claim elsewhere (the provisioner launches what it creates).
const LAUNCHING_RECHECK: Duration = Duration::from_secs(1);

/// What a launch of a claim may skip.
#[derive(Debug)]
pub enum FirstLaunch<'a> {
    /// Created by this process, never tried: nothing to adopt. Others asking meanwhile are told to wait, until
    /// the guard is dropped.
    Yes(Launching<'a>),
    /// The create call has not returned, or another task of this process is launching it: ask again then.
    Wait(Duration),
    /// Anything else: look for an instance first.
    No,
}

#[derive(Debug, PartialEq, Eq)]
enum Entry {
    Creating,
    Created { uid: String },
    Launching { uid: String },
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

    /// Whether the claim `name` with `uid` is launched for the first time. After that launch (the guard
    /// dropped, whatever its outcome) it is not.
    pub fn first_launch<'a>(&'a self, name: &str, uid: &str) -> FirstLaunch<'a> {
        let mut claims = self.lock();
        let Some(entry) = claims.get_mut(name) else {
            return FirstLaunch::No;
        };
        match entry {
            Entry::Creating => FirstLaunch::Wait(CREATE_CALL_RECHECK),
            Entry::Launching { uid: launching } if launching == uid => {
                FirstLaunch::Wait(LAUNCHING_RECHECK)
            }
            Entry::Created { uid: created } if created == uid => {
                let uid = std::mem::take(created);
                *entry = Entry::Launching { uid };
                FirstLaunch::Yes(Launching {
                    created: self,
                    name: name.to_owned(),
                })
            }
            Entry::Created { .. } | Entry::Launching { .. } => FirstLaunch::No,
        }
    }

    fn lock(&self) -> MutexGuard<'_, HashMap<String, Entry>> {
        // Every update is a single insert, replace or remove: a panic elsewhere leaves the map whole.
        self.claims.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// A first launch in progress; dropping it ends it.
pub struct Launching<'a> {
    created: &'a CreatedHere,
    name: String,
}

/// The claim's name only: the log of a launch step shows this, not every claim the process created.
impl std::fmt::Debug for Launching<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("Launching").field(&self.name).finish()
    }
}

impl Drop for Launching<'_> {
    fn drop(&mut self) {
        self.created.forget(&self.name);
    }
}

#[cfg(test)]
mod tests {
    use super::{CreatedHere, FirstLaunch};

    fn is_yes(launch: &FirstLaunch<'_>) -> bool {
        matches!(launch, FirstLaunch::Yes(_))
    }

    fn is_wait(launch: &FirstLaunch<'_>) -> bool {
        matches!(launch, FirstLaunch::Wait(_))
    }

    #[test]
    fn a_claim_created_here_skips_the_check_once_and_others_wait_for_that_launch() {
        let created = CreatedHere::default();
        created.creating("a");
        assert!(
            is_wait(&created.first_launch("a", "uid-1")),
            "create call out"
        );
        created.created("a", "uid-1");
        let first = created.first_launch("a", "uid-1");
        assert!(is_yes(&first));
        assert!(
            is_wait(&created.first_launch("a", "uid-1")),
            "launching in another task"
        );
        drop(first);
        assert!(
            matches!(created.first_launch("a", "uid-1"), FirstLaunch::No),
            "a retry must look for an instance"
        );
    }

    #[test]
    fn other_claims_of_the_name_and_failed_creates_are_checked() {
        let created = CreatedHere::default();
        assert!(matches!(
            created.first_launch("a", "uid-1"),
            FirstLaunch::No
        ));
        created.creating("a");
        created.created("a", "uid-2");
        assert!(
            matches!(created.first_launch("a", "uid-1"), FirstLaunch::No),
            "a claim of the same name from before a restart"
        );
        created.creating("b");
        created.forget("b");
        assert!(matches!(
            created.first_launch("b", "uid-3"),
            FirstLaunch::No
        ));
    }
}
