//! A fanout's followers: they start from the store, see every later event once, get the store again when they
//! fall behind, and cost nothing while no one follows.

use super::*;
use crate::controllers::state::store_of;
use serde_json::json;
use std::time::Duration;

fn node(name: &str, version: &str) -> Node {
    serde_json::from_value(json!({"metadata": {"name": name, "resourceVersion": version}}))
        .expect("a node")
}

fn names(events: &[Event<Arc<Node>>]) -> Vec<String> {
    events
        .iter()
        .map(|e| match e {
            Event::Init => "init".to_owned(),
            Event::InitDone => "done".to_owned(),
            Event::InitApply(n) => format!("list {}", n.metadata.name.as_deref().unwrap_or("")),
            Event::Apply(n) => format!("apply {}", n.metadata.name.as_deref().unwrap_or("")),
            Event::Delete(n) => format!("delete {}", n.metadata.name.as_deref().unwrap_or("")),
        })
        .collect()
}

/// A list's events with the listed objects in name order (a store has no order).
fn list_of(events: &[Event<Arc<Node>>]) -> Vec<String> {
    let mut names = names(events);
    let end = names.len().saturating_sub(1);
    if let Some(listed) = names.get_mut(1..end) {
        listed.sort();
    }
    names
}

async fn take(
    stream: &mut (impl Stream<Item = Event<Arc<Node>>> + Unpin),
    n: usize,
) -> Vec<Event<Arc<Node>>> {
    let mut events = Vec::new();
    for _ in 0..n {
        let next = tokio::time::timeout(Duration::from_secs(5), stream.next())
            .await
            .expect("an event within 5 s")
            .expect("the stream goes on");
        events.push(next);
    }
    events
}

#[tokio::test]
async fn a_follower_starts_from_the_store_and_sees_each_later_event() {
    let fanout: Fanout<Node> = Fanout::default();
    fanout.attach(store_of(vec![node("a", "1")]));
    // Sent before anyone follows: not kept.
    fanout.send(Event::Apply(node("early", "1")));
    let mut events = Box::pin(fanout.events());
    fanout.send(Event::Apply(node("b", "2")));
    fanout.send(Event::Delete(node("a", "3")));
    assert_eq!(
        names(&take(&mut events, 5).await),
        ["init", "list a", "done", "apply b", "delete a"]
    );
}

#[tokio::test]
async fn an_applied_object_is_the_stores_own() {
    let stored = node("a", "1");
    let store = store_of(vec![stored.clone()]);
    let fanout: Fanout<Node> = Fanout::default();
    fanout.attach(store.clone());
    let mut objects = Box::pin(fanout.objects());
    fanout.send(Event::Apply(stored));
    let first = tokio::time::timeout(Duration::from_secs(5), objects.next())
        .await
        .expect("in time")
        .expect("an object");
    let second = tokio::time::timeout(Duration::from_secs(5), objects.next())
        .await
        .expect("in time")
        .expect("an object");
    let in_store = store
        .get(&ObjectRef::new("a"))
        .expect("the node in the store");
    assert!(
        Arc::ptr_eq(&first, &in_store),
        "the listed object is shared"
    );
    assert!(
        Arc::ptr_eq(&second, &in_store),
        "the applied object is shared"
    );
}

#[tokio::test]
async fn a_follower_that_falls_behind_gets_the_store_again() {
    let fanout: Fanout<Node> = Fanout::default();
    fanout.attach(store_of(vec![node("a", "1"), node("b", "1")]));
    let mut events = Box::pin(fanout.events());
    assert_eq!(
        list_of(&take(&mut events, 4).await),
        ["init", "list a", "list b", "done"]
    );
    for i in 0..=CAPACITY {
        fanout.send(Event::Apply(node(&format!("n{i}"), "2")));
    }
    // The reflector never waited; the follower is told to list again, from the store.
    assert_eq!(
        list_of(&take(&mut events, 4).await),
        ["init", "list a", "list b", "done"]
    );
}

#[test]
fn nothing_is_kept_while_no_one_follows() {
    let fanout: Fanout<Node> = Fanout::default();
    fanout.attach(store_of(Vec::new()));
    for i in 0..10 {
        fanout.send(Event::Apply(node(&format!("n{i}"), "1")));
    }
    assert_eq!(fanout.tx.len(), 0);
}
