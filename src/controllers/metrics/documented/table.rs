//! The table of the metrics Karpenter v1.14 documents: each family's name, type and label names, read from
//! `families.txt` (a line a family, as that file's header says).

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Type {
    Counter,
    Gauge,
    Histogram,
    Summary,
}

/// Labels of the node gauges besides the well-known ones.
pub(super) const NODE: &str = "@node";
/// The operator kinds and the extra labels of their families (`@kind` in the table).
const KINDS: [(&str, &[&str]); 4] = [
    (
        "nodeclaim",
        &["karpenter_k8s_aws_ec2nodeclass", "karpenter_sh_nodepool"],
    ),
    (
        "node",
        &[
            "karpenter_k8s_aws_ec2nodeclass",
            "karpenter_sh_nodepool",
            "karpenter_sh_initialized",
        ],
    ),
    ("nodepool", &[]),
    ("ec2nodeclass", &[]),
];

/// `(name as documented, type, label names)`; [`NODE`] stands for the node gauges' well-known labels and
/// `node_name`, `phase`, `managed`.
pub(super) fn documented() -> Vec<(String, Type, Vec<String>)> {
    let mut list = Vec::new();
    for line in include_str!("families.txt").lines() {
        if line.starts_with('#') || line.trim().is_empty() {
            continue;
        }
        let mut fields = line.split_whitespace();
        let (Some(name), Some(kind), Some(labels), None) =
            (fields.next(), fields.next(), fields.next(), fields.next())
        else {
            panic!("families.txt: not `<name> <type> <labels>`: {line:?}");
        };
        let kind = match kind {
            "counter" => Type::Counter,
            "gauge" => Type::Gauge,
            "histogram" => Type::Histogram,
            "summary" => Type::Summary,
            other => panic!("families.txt: unknown type {other:?} in {line:?}"),
        };
        let labels: Vec<&str> = labels.split(',').filter(|l| *l != "-").collect();
        if !name.contains("{kind}") {
            list.push((name.to_owned(), kind, owned(&labels)));
            continue;
        }
        for (operator_kind, extra) in KINDS {
            let labels: Vec<&str> = labels
                .iter()
                .flat_map(|l| {
                    if *l == "@kind" {
                        extra
                    } else {
                        std::slice::from_ref(l)
                    }
                })
                .copied()
                .collect();
            list.push((name.replace("{kind}", operator_kind), kind, owned(&labels)));
        }
    }
    list
}

fn owned(names: &[&str]) -> Vec<String> {
    names.iter().map(|n| (*n).to_owned()).collect()
}
