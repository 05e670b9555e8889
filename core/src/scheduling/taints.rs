//! Taints and tolerations: whether a pod may land on a node of a NodePool.

use crate::api::nodepool::{Taint, TaintEffect};
use k8s_openapi::api::core::v1::Toleration;

/// Whether `toleration` tolerates `taint`, with Kubernetes' rules: an empty effect matches every effect,
/// `Exists` with an empty key matches every key, `Equal` (the default) needs the same key and value.
pub fn tolerates(toleration: &Toleration, taint: &Taint) -> bool {
    let effect_matches = toleration
        .effect
        .as_deref()
        .is_none_or(|e| e.is_empty() || e == taint.effect.as_str());
    let key = toleration.key.as_deref().unwrap_or_default();
    match toleration.operator.as_deref() {
        Some("Exists") => effect_matches && (key.is_empty() || key == taint.key),
        _ => {
            effect_matches
                && key == taint.key
                && toleration.value.as_deref().unwrap_or_default()
                    == taint.value.as_deref().unwrap_or_default()
        }
    }
}

/// The first taint of `taints` that `tolerations` do not tolerate. `PreferNoSchedule` taints count only while
/// `soft_taints_bind` (they are relaxed last, as Karpenter does).
pub fn untolerated<'a>(
    tolerations: &[Toleration],
    taints: &'a [Taint],
    soft_taints_bind: bool,
) -> Option<&'a Taint> {
    taints
        .iter()
        .filter(|t| soft_taints_bind || t.effect != TaintEffect::PreferNoSchedule)
        .find(|taint| !tolerations.iter().any(|t| tolerates(t, taint)))
}

/// Taints a node carries while it comes up, by key and effect (Karpenter's `KnownEphemeralTaints`), and the key
/// prefix of the Node Readiness Controller's. Until a node kerf launched is initialized they say nothing about
/// where pods may go, so the solve ignores them (and the claim's startup taints) on such nodes.
const EPHEMERAL_TAINTS: [(&str, TaintEffect); 5] = [
    ("node.kubernetes.io/not-ready", TaintEffect::NoSchedule),
    ("node.kubernetes.io/not-ready", TaintEffect::NoExecute),
    ("node.kubernetes.io/unreachable", TaintEffect::NoSchedule),
    (
        "node.cloudprovider.kubernetes.io/uninitialized",
        TaintEffect::NoSchedule,
    ),
    (
        crate::api::well_known::UNREGISTERED_TAINT_KEY,
        TaintEffect::NoExecute,
    ),
];
const EPHEMERAL_TAINT_PREFIX: &str = "readiness.k8s.io/";

/// Whether `taint` is one a node carries only while it comes up.
pub fn is_ephemeral(taint: &Taint) -> bool {
    EPHEMERAL_TAINTS
        .iter()
        .any(|(key, effect)| taint.key == *key && taint.effect == *effect)
        || taint.key.starts_with(EPHEMERAL_TAINT_PREFIX)
}

/// `key=value:Effect`, as kubectl prints a taint.
pub fn describe(taint: &Taint) -> String {
    match &taint.value {
        Some(value) => format!("{}={}:{}", taint.key, value, taint.effect.as_str()),
        None => format!("{}:{}", taint.key, taint.effect.as_str()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn taint(key: &str, value: Option<&str>, effect: TaintEffect) -> Taint {
        Taint {
            key: key.into(),
            value: value.map(Into::into),
            effect,
            time_added: None,
        }
    }

    fn toleration(
        key: Option<&str>,
        op: Option<&str>,
        value: Option<&str>,
        effect: Option<&str>,
    ) -> Toleration {
        Toleration {
            key: key.map(Into::into),
            operator: op.map(Into::into),
            value: value.map(Into::into),
            effect: effect.map(Into::into),
            toleration_seconds: None,
        }
    }

    #[test]
    fn kubernetes_toleration_rules() {
        let gpu = taint("nvidia.com/gpu", Some("true"), TaintEffect::NoSchedule);
        assert!(tolerates(
            &toleration(Some("nvidia.com/gpu"), None, Some("true"), None),
            &gpu
        ));
        assert!(tolerates(
            &toleration(
                Some("nvidia.com/gpu"),
                Some("Exists"),
                None,
                Some("NoSchedule")
            ),
            &gpu
        ));
        assert!(
            tolerates(&toleration(None, Some("Exists"), None, None), &gpu),
            "tolerate everything"
        );
        assert!(!tolerates(
            &toleration(Some("nvidia.com/gpu"), None, Some("false"), None),
            &gpu
        ));
        assert!(!tolerates(
            &toleration(
                Some("nvidia.com/gpu"),
                Some("Exists"),
                None,
                Some("NoExecute")
            ),
            &gpu
        ));
        let soft = [taint("a", None, TaintEffect::PreferNoSchedule)];
        assert_eq!(untolerated(&[], &soft, false), None);
        assert!(untolerated(&[], &soft, true).is_some());
        assert_eq!(describe(&gpu), "nvidia.com/gpu=true:NoSchedule");
    }
}
