//! A model of what kube-apiserver 1.25+ does with an object of one of kerf's CRDs: the OpenAPI schema check
//! (kerf's `CompiledSchema`, which reports what the apiserver's does) and then every `x-kubernetes-validations` rule,
//! read from the generated CRDs (never from a second copy) and evaluated with the `cel` crate.
//!
//! What the apiserver does, and so what this does (k8s.io/apiextensions-apiserver `pkg/apiserver/schema/cel`):
//! * a rule runs on every node its schema path reaches in the object: each item of a list, each value of a map;
//!   a node absent from the object is not checked;
//! * a rule that names `oldSelf` (a transition rule) runs only on UPDATE, and only where the old object has the
//!   node too; lists are atomic here, so nothing below a list item is correlated with the old object;
//! * a rule that evaluates to an error refuses the object (`<error> evaluating rule: <rule>`);
//! * errors of kind Required, Unsupported value or wrong type from the schema step skip the rules;
//! * on UPDATE, errors at a node whose value did not change are dropped (CRD validation ratcheting, default since
//!   1.30), except those of transition rules.
//!
//! `find` (Kubernetes' regex library) is not in the `cel` crate: it is registered here as the first match of the
//! regex, or `""`. `split` comes from the crate's strings extension, as Kubernetes' comes from cel-go's.
#![allow(dead_code)] // each test binary uses a different subset

use cel::extractors::This;
use cel::{Context, Env, ExecutionError, Program, Value as CelValue};
use kerf::api::schema::{prune_nulls, CompiledSchema};
use kerf::api::validation::{ratchet, ErrorKind, FieldError, FieldPath, SchemaType};
use serde_json::Value;
use std::sync::Arc;

/// The three CRDs, as `spec.names.kind`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    NodePool,
    NodeClaim,
    EC2NodeClass,
    NodeOverlay,
    CapacityBuffer,
}

impl Kind {
    pub fn name(self) -> &'static str {
        match self {
            Kind::NodePool => "NodePool",
            Kind::NodeClaim => "NodeClaim",
            Kind::EC2NodeClass => "EC2NodeClass",
            Kind::NodeOverlay => "NodeOverlay",
            Kind::CapacityBuffer => "CapacityBuffer",
        }
    }
}

/// One step from a schema node to a child: a field, a list's items, or a map's values.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Step {
    Field(String),
    Items,
    Values,
}

/// One compiled rule at its schema node.
pub struct Rule {
    steps: Vec<Step>,
    schema_type: SchemaType,
    pub rule: String,
    pub message: String,
    transition: bool,
    program: Program,
}

impl Rule {
    /// The node's path as `cel_rules` writes it (`spec.template.spec.requirements[].key`).
    pub fn path(&self) -> String {
        let mut path = String::new();
        for step in &self.steps {
            match step {
                Step::Field(name) if path.is_empty() => path.push_str(name),
                Step::Field(name) => {
                    path.push('.');
                    path.push_str(name);
                }
                Step::Items => path.push_str("[]"),
                Step::Values => path.push_str("{}"),
            }
        }
        path
    }
}

struct KindModel {
    kind: Kind,
    schema: CompiledSchema,
    rules: Vec<Rule>,
}

/// A CEL rule's refusal of one node.
#[derive(Debug, Clone)]
pub struct CelError {
    pub error: FieldError,
    /// The rule's expression.
    pub rule: String,
    /// The rule failed to evaluate (the error says why) rather than returning false.
    pub evaluation_failed: bool,
}

/// The apiserver's verdict on one object.
#[derive(Debug, Default)]
pub struct Verdict {
    /// Errors of the schema step.
    pub schema: Vec<FieldError>,
    /// Errors of the CEL rules.
    pub cel: Vec<CelError>,
    /// The schema step found an error that keeps the apiserver from running the rules.
    pub cel_skipped: bool,
}

impl Verdict {
    pub fn refused(&self) -> bool {
        !self.schema.is_empty() || !self.cel.is_empty() || self.cel_skipped
    }

    /// The CEL errors as the apiserver prints them.
    pub fn cel_messages(&self) -> Vec<String> {
        self.cel.iter().map(|e| e.error.to_string()).collect()
    }
}

/// Every kind's schema and rules, compiled once.
pub struct Apiserver {
    env: Arc<Env>,
    kinds: Vec<KindModel>,
}

impl Apiserver {
    /// Compiles the schemas and rules of `kerf::api::crds::with_cel_rules()` (what `kerf crds --cel-rules` prints;
    /// the chart's CRDs are the same without the rules). Fails on a rule that does not compile or a node whose type has no name.
    pub fn from_generated_crds() -> Result<Apiserver, String> {
        let mut env = Env::stdlib();
        env.add_extension(cel::extensions::strings)
            .map_err(|e| format!("strings extension: {e}"))?;
        let env = Arc::new(env);
        let mut kinds = Vec::new();
        for crd in kerf::api::crds::with_cel_rules() {
            let kind = match crd.spec.names.kind.as_str() {
                "NodePool" => Kind::NodePool,
                "NodeClaim" => Kind::NodeClaim,
                "EC2NodeClass" => Kind::EC2NodeClass,
                "NodeOverlay" => Kind::NodeOverlay,
                "CapacityBuffer" => Kind::CapacityBuffer,
                other => return Err(format!("unexpected CRD kind {other}")),
            };
            let schema = crd
                .spec
                .versions
                .first()
                .and_then(|v| v.schema.as_ref())
                .and_then(|s| s.open_api_v3_schema.as_ref())
                .map(serde_json::to_value)
                .transpose()
                .map_err(|e| e.to_string())?
                .ok_or_else(|| format!("{} has no schema", kind.name()))?;
            let mut rules = Vec::new();
            collect_rules(&env, &schema, &mut Vec::new(), &mut rules)?;
            kinds.push(KindModel {
                kind,
                schema: CompiledSchema::compile(&schema).map_err(|e| e.to_string())?,
                rules,
            });
        }
        Ok(Apiserver { env, kinds })
    }

    /// The rules of one kind, in schema order.
    pub fn rules(&self, kind: Kind) -> &[Rule] {
        self.model(kind).map_or(&[], |m| &m.rules)
    }

    fn model(&self, kind: Kind) -> Option<&KindModel> {
        self.kinds.iter().find(|m| m.kind == kind)
    }

    /// Validates `new` on CREATE (`old` is `None`) or UPDATE.
    pub fn validate(&self, kind: Kind, new: &Value, old: Option<&Value>) -> Verdict {
        let Some(model) = self.model(kind) else {
            return Verdict::default();
        };
        let mut new = new.clone();
        prune_nulls(&mut new);
        let old = old.map(|old| {
            let mut old = old.clone();
            prune_nulls(&mut old);
            old
        });
        let (schema, _omitted) = model.schema.check(&new).errors.into_parts();
        let cel_skipped = schema.iter().any(|e| {
            matches!(
                e.kind,
                ErrorKind::Required | ErrorKind::NotSupported { .. } | ErrorKind::WrongType { .. }
            )
        });
        let cel = if cel_skipped {
            Vec::new()
        } else {
            self.run_rules(model, &new, old.as_ref())
        };
        let Some(old) = old else {
            return Verdict {
                schema,
                cel,
                cel_skipped,
            };
        };
        // Ratcheting keeps an error only where the UPDATE changed the value (or the rule is a transition rule).
        let cel = cel
            .into_iter()
            .filter(|e| !ratchet(vec![e.error.clone()], &new, &old).is_empty())
            .collect();
        Verdict {
            schema: ratchet(schema, &new, &old),
            cel,
            cel_skipped,
        }
    }

    /// Runs every rule of `kind` on `new` (and `old`), without the schema step: what the apiserver never does with
    /// an object its schema refuses, but what a fuzz test wants, to reach the evaluator with any value.
    pub fn run_rules_unchecked(
        &self,
        kind: Kind,
        new: &Value,
        old: Option<&Value>,
    ) -> Vec<CelError> {
        self.model(kind)
            .map(|model| self.run_rules(model, new, old))
            .unwrap_or_default()
    }

    fn run_rules(&self, model: &KindModel, new: &Value, old: Option<&Value>) -> Vec<CelError> {
        let mut errors = Vec::new();
        for rule in &model.rules {
            let mut nodes = Vec::new();
            reach(new, old, &rule.steps, FieldPath::default(), &mut nodes);
            for (path, value, old_value) in nodes {
                errors.extend(self.evaluate(rule, &path, value, old_value));
            }
        }
        errors
    }

    /// Runs one rule on one node: the error it reports, if any.
    fn evaluate(
        &self,
        rule: &Rule,
        path: &FieldPath,
        value: &Value,
        old: Option<&Value>,
    ) -> Option<CelError> {
        let old = match (rule.transition, old) {
            (true, None) => return None,
            (true, Some(old)) => Some(old),
            (false, _) => None,
        };
        let mut context = Context::with_env(self.env.clone());
        if let Err(e) = context.add_function("find", find) {
            return Some(self.failure(rule, path, &format!("registering find: {e}")));
        }
        match (cel::to_value(value), old.map(cel::to_value).transpose()) {
            (Ok(this), Ok(old)) => {
                context.add_variable_from_value("self", this);
                if let Some(old) = old {
                    context.add_variable_from_value("oldSelf", old);
                }
            }
            (Err(e), _) | (_, Err(e)) => return Some(self.failure(rule, path, &e.to_string())),
        }
        let error = match rule.program.execute(&context) {
            Ok(CelValue::Bool(true)) => return None,
            Ok(CelValue::Bool(false)) => {
                return Some(refusal(rule, path, rule.message.clone(), false))
            }
            Ok(other) => format!("rule returned {other:?}, not a bool"),
            Err(e) => e.to_string(),
        };
        Some(self.failure(rule, path, &error))
    }

    fn failure(&self, rule: &Rule, path: &FieldPath, error: &str) -> CelError {
        let message = format!("{error} evaluating rule: {}", rule.rule);
        refusal(rule, path, message, true)
    }
}

fn refusal(rule: &Rule, path: &FieldPath, message: String, evaluation_failed: bool) -> CelError {
    let error = FieldError::rule(path, rule.schema_type, message);
    CelError {
        // Transition rules are never ratcheted.
        error: if rule.transition {
            error.never_ratchets()
        } else {
            error
        },
        rule: rule.rule.clone(),
        evaluation_failed,
    }
}

/// Kubernetes' `<string>.find(<regex>)`: the first match, or `""` when there is none.
fn find(This(this): This<Arc<String>>, pattern: Arc<String>) -> Result<CelValue, ExecutionError> {
    let regex = regex::RegexBuilder::new(&pattern)
        .size_limit(1 << 20)
        .build()
        .map_err(|e| ExecutionError::function_error("find", e))?;
    let found = regex.find(&this).map(|m| m.as_str().to_owned());
    Ok(CelValue::from(found.unwrap_or_default()))
}

/// Walks a schema node and its children, compiling every rule found with the path that reached it.
fn collect_rules(
    env: &Env,
    node: &Value,
    steps: &mut Vec<Step>,
    out: &mut Vec<Rule>,
) -> Result<(), String> {
    for entry in node["x-kubernetes-validations"]
        .as_array()
        .into_iter()
        .flatten()
    {
        let rule = entry["rule"].as_str().unwrap_or_default().to_owned();
        let message = entry["message"].as_str().unwrap_or_default().to_owned();
        let schema_type = match node["type"].as_str() {
            Some("string") => SchemaType::String,
            Some("object") => SchemaType::Object,
            Some("array") => SchemaType::Array,
            Some("integer") => SchemaType::Integer,
            other => return Err(format!("rule {rule:?} on a node of type {other:?}")),
        };
        let program = env
            .compile(&rule)
            .map_err(|e| format!("rule {rule:?} does not compile: {e}"))?;
        out.push(Rule {
            steps: steps.clone(),
            schema_type,
            transition: rule.contains("oldSelf"),
            rule,
            message,
            program,
        });
    }
    for (name, child) in node["properties"].as_object().into_iter().flatten() {
        steps.push(Step::Field(name.clone()));
        collect_rules(env, child, steps, out)?;
        steps.pop();
    }
    for (key, step) in [
        ("items", Step::Items),
        ("additionalProperties", Step::Values),
    ] {
        if node[key].is_object() {
            steps.push(step);
            collect_rules(env, &node[key], steps, out)?;
            steps.pop();
        }
    }
    Ok(())
}

/// The nodes `steps` reach in `value`, with their paths and (where correlated) their old values.
fn reach<'a>(
    value: &'a Value,
    old: Option<&'a Value>,
    steps: &[Step],
    path: FieldPath,
    out: &mut Vec<(FieldPath, &'a Value, Option<&'a Value>)>,
) {
    let Some((step, rest)) = steps.split_first() else {
        out.push((path, value, old));
        return;
    };
    match step {
        Step::Field(name) => {
            if let Some(child) = value.get(name) {
                let old = old.and_then(|o| o.get(name));
                reach(child, old, rest, path.child(name), out);
            }
        }
        Step::Items => {
            for (i, item) in value.as_array().into_iter().flatten().enumerate() {
                reach(item, None, rest, path.index(i), out);
            }
        }
        Step::Values => {
            for (key, child) in value.as_object().into_iter().flatten() {
                reach(
                    child,
                    old.and_then(|o| o.get(key)),
                    rest,
                    path.key(key),
                    out,
                );
            }
        }
    }
}
