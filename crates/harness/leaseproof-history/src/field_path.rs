//! Which field a deserialisation error is about, where serde does not say.
//!
//! Goal: a refused line names its field (`kind.op.ttl_us`), also inside the
//! internally tagged objects of the history format and of the client
//! protocol, where serde loses the path. Method: remove fields one at a
//! time; the one whose removal changes the error is it.

/// The tags of the format's tagged objects: removing one changes any error.
/// (`op` is also the name of the field holding an invoke's operation.)
const TAGS: [&str; 5] = ["record", "type", "op", "outcome", "result"];

/// Where inside `path` (`.` for the whole object) the error `problem` of
/// deserialising `record` as `T` is, when serde stopped at a tagged object
/// (it loses the path inside one: `kind` for a bad `kind.op.ttl_us`): the
/// field whose removal changes the error, followed down while it is an
/// object. Fields are read in order, so removing any other leaves the same
/// first error.
pub fn field_in_error<T: serde::de::DeserializeOwned>(
    record: &serde_json::Value,
    path: &str,
    problem: &str,
) -> String {
    let judge = |record: serde_json::Value| {
        serde_json::from_value::<T>(record)
            .err()
            .map(|error| error.to_string())
    };
    let original = judge(record.clone());
    // The message names a key or a tag: find where it is (or, missing,
    // which object lacks it) below `path`, deepest first.
    let named = |prefix: &str| {
        problem
            .split_once(prefix)
            .and_then(|(_, rest)| rest.split('`').next())
            .map(str::to_string)
    };
    let objects = objects_below(record, path);
    // Whether changing the object at `at` by `change` changes the error,
    // into one that does not blame `key` in that object instead: the same
    // key or tag may stand at several depths, and only one is the culprit.
    let culprit =
        |at: &str, key: &str, change: &dyn Fn(&mut serde_json::Map<String, serde_json::Value>)| {
            let mut changed = record.clone();
            if let Some(serde_json::Value::Object(object)) = pointer_mut(&mut changed, at) {
                change(object);
            }
            let error = judge(changed);
            error != original
                && !error
                    .as_deref()
                    .is_some_and(|error| error.starts_with(&format!("unknown field `{key}`")))
        };
    if let Some(key) = named("unknown field `") {
        // The object whose copy of the key is read: without it, the error
        // is another.
        let remove = |object: &mut serde_json::Map<String, serde_json::Value>| {
            object.remove(&key);
        };
        if let Some((at, _)) = objects
            .iter()
            .find(|(at, object)| object.contains_key(&key) && culprit(at, &key, &remove))
        {
            return joined(at, &key);
        }
        return path.to_string();
    }
    if let Some(tag) = named("unknown variant `") {
        // The key holding it: a tag, or a field of an enum's value (`kind`).
        let holding = |object: &serde_json::Map<String, serde_json::Value>| {
            object
                .iter()
                .find(|(_, value)| value.as_str() == Some(tag.as_str()))
                .map(|(key, _)| key.clone())
        };
        if let Some((at, key)) = objects.iter().find_map(|(at, object)| {
            let key = holding(object)?;
            let remove = |object: &mut serde_json::Map<String, serde_json::Value>| {
                object.remove(&key);
            };
            culprit(at, &key, &remove).then_some((at, key))
        }) {
            return joined(at, &key);
        }
        return path.to_string();
    }
    if let Some(field) = named("missing field `") {
        // The object that lacks it: given the field (any value), the error
        // is no longer this one — and not that the object has no such field.
        let insert = |object: &mut serde_json::Map<String, serde_json::Value>| {
            object.insert(field.clone(), serde_json::Value::Null);
        };
        for (at, object) in &objects {
            if !object.contains_key(&field) && culprit(at, &field, &insert) {
                return joined(at, &field);
            }
        }
        return path.to_string();
    }
    if problem.contains("field `") || problem.contains("variant `") {
        return path.to_string(); // the message names it already
    }
    // `.` is the object itself (serde_path_to_error's name for the root).
    let mut segments: Vec<String> = path
        .split('.')
        .filter(|segment| !segment.is_empty())
        .map(str::to_string)
        .collect();
    while let Some(serde_json::Value::Object(node)) = segments
        .iter()
        .try_fold(record, |value, segment| value.get(segment.as_str()))
    {
        let culprit = node
            .keys()
            // A tag is a string naming the variant (`"op": "acquire"`),
            // unlike a field of the same name holding an object.
            .filter(|key| !(TAGS.contains(&key.as_str()) && node[key.as_str()].is_string()))
            .find(|key| {
                let mut without = record.clone();
                let parent = segments.iter().try_fold(&mut without, |value, segment| {
                    value.get_mut(segment.as_str())
                });
                if let Some(serde_json::Value::Object(parent)) = parent {
                    parent.remove(key.as_str());
                }
                judge(without) != original
            })
            .cloned();
        match culprit {
            Some(key) => segments.push(key),
            None => break,
        }
    }
    if segments.is_empty() {
        return ".".to_string();
    }
    segments.join(".")
}

/// Every object at or below `path` in `record` with its path, deepest first.
fn objects_below<'v>(
    record: &'v serde_json::Value,
    path: &str,
) -> Vec<(String, &'v serde_json::Map<String, serde_json::Value>)> {
    fn walk<'v>(
        at: String,
        value: &'v serde_json::Value,
        found: &mut Vec<(String, &'v serde_json::Map<String, serde_json::Value>)>,
    ) {
        if let serde_json::Value::Object(object) = value {
            for (key, child) in object {
                walk(joined(&at, key), child, found);
            }
            found.push((at, object));
        }
    }
    let mut found = Vec::new();
    let start = path
        .split('.')
        .filter(|segment| !segment.is_empty())
        .try_fold(record, |value, segment| value.get(segment));
    if let Some(start) = start {
        walk(path.to_string(), start, &mut found);
    }
    found
        .sort_by_key(|(at, _)| std::cmp::Reverse(at.matches('.').count() + usize::from(at != ".")));
    found
}

/// `key` below the object at `at` (`.` the root).
fn joined(at: &str, key: &str) -> String {
    if at == "." || at.is_empty() {
        key.to_string()
    } else {
        format!("{at}.{key}")
    }
}

/// A field holding a unit-variant enum, read only from its name (`"held"`):
/// serde's derive also takes `{"held": null}`, a form neither the history
/// format nor the client protocol has, and a reader must not guess.
pub fn by_name<'de, D, T>(deserializer: D) -> Result<T, D::Error>
where
    D: serde::Deserializer<'de>,
    T: serde::Deserialize<'de>,
{
    let name = <String as serde::Deserialize>::deserialize(deserializer)?;
    T::deserialize(serde::de::value::StringDeserializer::<D::Error>::new(name))
}

/// The value at the dotted path `at` (`.` the root), mutably.
fn pointer_mut<'v>(
    record: &'v mut serde_json::Value,
    at: &str,
) -> Option<&'v mut serde_json::Value> {
    at.split('.')
        .filter(|segment| !segment.is_empty())
        .try_fold(record, |value, segment| value.get_mut(segment))
}

/// The first key that appears twice in one object of the JSON text `line`,
/// as a path (`kind.outcome`): serde keeps the last of them silently, and
/// another reader might keep the first, so such a line means two things.
/// `None` when every object's keys are distinct (or the text is not JSON:
/// the parser says so).
pub fn duplicate_key(line: &str) -> Option<String> {
    use serde::de::{Error as _, MapAccess, SeqAccess, Visitor};

    /// Any JSON value, refusing a repeated key in its objects.
    struct Distinct;

    impl<'de> serde::Deserialize<'de> for Distinct {
        fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Distinct, D::Error> {
            deserializer.deserialize_any(DistinctVisitor)
        }
    }

    struct DistinctVisitor;

    impl<'de> Visitor<'de> for DistinctVisitor {
        type Value = Distinct;

        fn expecting(&self, formatter: &mut std::fmt::Formatter) -> std::fmt::Result {
            formatter.write_str("any JSON value")
        }

        fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Distinct, A::Error> {
            let mut keys = std::collections::BTreeSet::new();
            while let Some(key) = map.next_key::<String>()? {
                if !keys.insert(key.clone()) {
                    return Err(A::Error::custom(format!("duplicate key `{key}`")));
                }
                map.next_value::<Distinct>()?;
            }
            Ok(Distinct)
        }

        fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Distinct, A::Error> {
            while seq.next_element::<Distinct>()?.is_some() {}
            Ok(Distinct)
        }

        fn visit_bool<E>(self, _: bool) -> Result<Distinct, E> {
            Ok(Distinct)
        }
        fn visit_i64<E>(self, _: i64) -> Result<Distinct, E> {
            Ok(Distinct)
        }
        fn visit_u64<E>(self, _: u64) -> Result<Distinct, E> {
            Ok(Distinct)
        }
        fn visit_f64<E>(self, _: f64) -> Result<Distinct, E> {
            Ok(Distinct)
        }
        fn visit_str<E>(self, _: &str) -> Result<Distinct, E> {
            Ok(Distinct)
        }
        fn visit_unit<E>(self) -> Result<Distinct, E> {
            Ok(Distinct)
        }
    }

    let mut deserializer = serde_json::Deserializer::from_str(line);
    let error = serde_path_to_error::deserialize::<_, Distinct>(&mut deserializer).err()?;
    let problem = error.inner().to_string();
    let key = problem
        .strip_prefix("duplicate key `")?
        .split('`')
        .next()?
        .to_string();
    let path = error.path().to_string();
    Some(if path == "." {
        key
    } else {
        format!("{path}.{key}")
    })
}
