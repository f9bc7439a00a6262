//! History lines written by hand, as a recorder writes them: the pieces the
//! tests that read JSON lines share.

/// An event line: `worker` at `true_us`, index `index`, `kind` as JSON.
pub fn event(index: u64, worker: &str, true_us: i64, kind: &str) -> String {
    format!(
        r#"{{"record":"event","index":{index},"worker":"{worker}","incarnation":0,"true_time_us":{true_us},"local_time_us":{true_us},"kind":{kind}}}"#
    )
}

/// An invoke event's `kind`.
pub fn invoke(op_id: u64, op: &str) -> String {
    format!(r#"{{"type":"invoke","op_id":{op_id},"op":{op}}}"#)
}

/// An ok completion's `kind`, `result` as JSON.
pub fn complete(op_id: u64, result: &str) -> String {
    format!(
        r#"{{"type":"complete","op_id":{op_id},"outcome":{{"outcome":"ok","result":{result}}}}}"#
    )
}
