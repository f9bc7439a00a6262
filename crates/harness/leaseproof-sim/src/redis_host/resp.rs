//! RESP2, the Redis wire format, as far as a client of the simulated Redis
//! speaks it: requests are arrays of bulk strings; replies are simple
//! strings, errors, integers, bulk strings (or nil) and arrays.
//!
//! Invariant: a request is parsed only when it is complete; a malformed one
//! is an error that closes the connection, as Redis does with a protocol error.

/// A reply, as the server writes it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Reply {
    /// `+OK`
    Status(String),
    /// `-ERR …`
    Error(String),
    /// `:42`
    Integer(i64),
    /// `$3\r\nabc`, or `$-1` for nil.
    Bulk(Option<Vec<u8>>),
    /// `*2\r\n…`
    Array(Vec<Reply>),
}

impl Reply {
    /// The reply's bytes on the wire.
    pub fn encode(&self, out: &mut Vec<u8>) {
        match self {
            Reply::Status(text) => {
                out.push(b'+');
                out.extend_from_slice(text.as_bytes());
            }
            Reply::Error(text) => {
                out.push(b'-');
                out.extend_from_slice(text.as_bytes());
            }
            Reply::Integer(value) => out.extend_from_slice(format!(":{value}").as_bytes()),
            Reply::Bulk(None) => out.extend_from_slice(b"$-1"),
            Reply::Bulk(Some(bytes)) => {
                out.extend_from_slice(format!("${}\r\n", bytes.len()).as_bytes());
                out.extend_from_slice(bytes);
            }
            Reply::Array(items) => {
                out.extend_from_slice(format!("*{}\r\n", items.len()).as_bytes());
                for item in items {
                    item.encode(out);
                }
                // Each item ended its own line; the array adds none.
                return;
            }
        }
        out.extend_from_slice(b"\r\n");
    }

    /// A short rendering for the trace.
    pub fn show(&self) -> String {
        match self {
            Reply::Status(text) => text.clone(),
            Reply::Error(text) => format!("ERROR {text}"),
            Reply::Integer(value) => value.to_string(),
            Reply::Bulk(None) => "nil".to_string(),
            Reply::Bulk(Some(bytes)) => format!("{:?}", String::from_utf8_lossy(bytes)),
            Reply::Array(items) => format!(
                "[{}]",
                items.iter().map(Reply::show).collect::<Vec<_>>().join(", ")
            ),
        }
    }
}

/// Takes one complete request (an array of bulk strings) off the front of
/// `buffer`: `Ok(None)` when more bytes are needed.
pub fn take_request(buffer: &mut Vec<u8>) -> Result<Option<Vec<Vec<u8>>>, String> {
    let mut at = 0;
    let Some(count) = header(buffer, &mut at, b'*')? else {
        return Ok(None);
    };
    let count = usize::try_from(count).map_err(|_| "a negative array length".to_string())?;
    if count > 1024 {
        return Err(format!("an array of {count} arguments"));
    }
    let mut parts = Vec::with_capacity(count);
    for _ in 0..count {
        let Some(length) = header(buffer, &mut at, b'$')? else {
            return Ok(None);
        };
        let length = usize::try_from(length).map_err(|_| "a nil argument".to_string())?;
        if buffer.len() < at + length + 2 {
            return Ok(None);
        }
        if &buffer[at + length..at + length + 2] != b"\r\n" {
            return Err("a bulk string not ended by CRLF".to_string());
        }
        parts.push(buffer[at..at + length].to_vec());
        at += length + 2;
    }
    buffer.drain(..at);
    Ok(Some(parts))
}

/// Reads `{kind}{number}\r\n` at `at`.
fn header(buffer: &[u8], at: &mut usize, kind: u8) -> Result<Option<i64>, String> {
    let Some(&first) = buffer.get(*at) else {
        return Ok(None);
    };
    if first != kind {
        return Err(format!(
            "expected {:?}, got {:?}",
            kind as char, first as char
        ));
    }
    let Some(end) = buffer[*at..].windows(2).position(|w| w == b"\r\n") else {
        return Ok(None);
    };
    let digits = std::str::from_utf8(&buffer[*at + 1..*at + end])
        .map_err(|_| "a length that is not text".to_string())?;
    let value = digits
        .parse::<i64>()
        .map_err(|_| format!("a length {digits:?}"))?;
    *at += end + 2;
    Ok(Some(value))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_request_is_taken_only_when_complete() {
        let whole = b"*2\r\n$3\r\nGET\r\n$1\r\nk\r\n*1\r\n$4\r\nPING\r\n".to_vec();
        for cut in 0..20 {
            let mut partial = whole[..cut].to_vec();
            assert_eq!(take_request(&mut partial), Ok(None), "cut at {cut}");
            assert_eq!(partial.len(), cut, "nothing consumed");
        }
        let mut buffer = whole.clone();
        assert_eq!(
            take_request(&mut buffer),
            Ok(Some(vec![b"GET".to_vec(), b"k".to_vec()]))
        );
        assert_eq!(take_request(&mut buffer), Ok(Some(vec![b"PING".to_vec()])));
        assert!(buffer.is_empty());
    }

    #[test]
    fn a_malformed_request_is_an_error() {
        for bad in [
            &b"GET k\r\n"[..],
            b"*1\r\n:3\r\n",
            b"*1\r\n$1\r\nkx\r\n",
            b"*x\r\n",
        ] {
            assert!(take_request(&mut bad.to_vec()).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn replies_are_encoded_as_redis_writes_them() {
        let mut out = Vec::new();
        Reply::Array(vec![
            Reply::Integer(7),
            Reply::Bulk(Some(b"ab".to_vec())),
            Reply::Bulk(None),
            Reply::Status("OK".to_string()),
            Reply::Error("ERR x".to_string()),
        ])
        .encode(&mut out);
        assert_eq!(
            out,
            b"*5\r\n:7\r\n$2\r\nab\r\n$-1\r\n+OK\r\n-ERR x\r\n".to_vec()
        );
    }
}
