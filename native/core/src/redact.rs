//! Secrets out of an exchange's bodies and raw frames, unless the user asks to see them.
//!
//! What counts as a secret is protocol knowledge (`protocol.secrets` says the same for replay and
//! library users): the SASL PLAIN password (the user stays), SCRAM client proofs (p=) and server
//! signatures (v=), the user name of a SCRAM login with a delegation token (tokenauth=true: it is
//! the token id), OAUTHBEARER bearer tokens (SaslAuthenticate AuthBytes, and the raw tokens after
//! SaslHandshake v0), delegation-token HMACs and token ids (Create/Describe answers, Renew/Expire
//! requests), the salts and salted passwords of AlterUserScramCredentials, and each of these
//! inside an Envelope.
//!
//! A decoded body gets the placeholder `<redacted>` in place of each secret; the raw frame keeps
//! its length, the secret's bytes starred, so it still parses. A message of an API that may carry
//! a secret but did not decode keeps only its header in the raw frame: where the secret sits in it
//! is unknown.
use std::rc::Rc;

use crate::decode::{get, Value};
use crate::schema::{key_id, key_name, Dir, K_API_KEY, K_BODY};

pub const PLACEHOLDER: &[u8] = b"<redacted>";
const PLACEHOLDER_TEXT: &str = "<redacted>";
const SASL_AUTHENTICATE: i16 = 36;
const ENVELOPE: i16 = 58;

/// The APIs whose messages may carry a secret: one that does not decode is blanked whole.
pub const SECRET_APIS: [i16; 7] = [SASL_AUTHENTICATE, 38, 39, 40, 41, 51, ENVELOPE];

/// The answers that may reach us as orphans (a capture begun mid-login) with a secret in them:
/// (api key, versions), newest first.
pub const ORPHAN_GUESSES: [(i16, &[i16]); 3] = [
    (SASL_AUTHENTICATE, &[2, 1, 0]),
    (38, &[3, 2, 1, 0]),
    (41, &[3, 2, 1, 0]),
];

/// Each secret's container as it was, with the (offset, length) spans of the secret in it: what
/// a caller stars in the raw frame, where the container is found.
pub type Found = Vec<(Vec<u8>, Vec<(usize, usize)>)>;

/// The fields holding a secret wherever they sit in a body of this API and direction.
fn secret_fields(api_key: i16, dir: Dir) -> &'static [&'static str] {
    match (api_key, dir) {
        (38, Dir::Response) | (41, Dir::Response) => &["Hmac", "TokenId"], // Create/DescribeDelegationToken
        (39, Dir::Request) | (40, Dir::Request) => &["Hmac"], // Renew/ExpireDelegationToken
        (51, Dir::Request) => &["Salt", "SaltedPassword"],    // AlterUserScramCredentials
        _ => &[],
    }
}

fn find(hay: &[u8], needle: &[u8], from: usize) -> Option<usize> {
    if from > hay.len() {
        return None;
    }
    if needle.is_empty() {
        return Some(from);
    }
    hay[from..]
        .windows(needle.len())
        .position(|w| w == needle)
        .map(|i| i + from)
}

fn rfind(hay: &[u8], needle: &[u8]) -> Option<usize> {
    if needle.len() > hay.len() {
        return None;
    }
    hay.windows(needle.len()).rposition(|w| w == needle)
}

/// `raw` with `*` over each span of each container, where that container sits inside `raw`. The
/// search runs over the bytes starred so far, so a container that occurs twice is found twice.
pub fn star_spans(raw: &[u8], found: &Found) -> Vec<u8> {
    let mut buf = raw.to_vec();
    if raw.is_empty() {
        return buf;
    }
    for (container, spans) in found {
        let Some(at) = find(&buf, container, 0) else {
            continue;
        };
        for &(start, n) in spans {
            let a = (at + start).min(buf.len());
            let z = (at + start + n).min(buf.len());
            buf[a..z].fill(b'*');
        }
    }
    buf
}

/// `raw` with every byte from `start` on starred (same length).
pub fn star_after(raw: &[u8], start: usize) -> Vec<u8> {
    let mut buf = raw.to_vec();
    if buf.len() > start {
        buf[start..].fill(b'*');
    }
    buf
}

/// Where a request header's client id ends (api key, version, correlation id, client id): what a
/// request that did not decode keeps.
pub fn request_header_end(raw: &[u8]) -> usize {
    if raw.len() < 10 {
        return 8;
    }
    let n = i16::from_be_bytes([raw[8], raw[9]]);
    if n >= 0 && n as usize <= raw.len() - 10 {
        10 + n as usize
    } else {
        10
    }
}

/// A value from `start` to the next comma (or the end).
fn value_span(b: &[u8], start: usize) -> (usize, usize) {
    let end = find(b, b",", start).unwrap_or(b.len());
    (start, end - start)
}

/// A SASL token with its secret parts replaced by the placeholder, and the spans they had.
pub fn redact_token(b: &[u8]) -> (Vec<u8>, Vec<(usize, usize)>) {
    let mut spans = Vec::new();
    if b.iter().filter(|&&c| c == 0).count() == 2 {
        // PLAIN: authzid NUL user NUL password
        let start = rfind(b, b"\0").unwrap_or(0) + 1;
        spans.push((start, b.len() - start));
    } else if b.starts_with(b"c=") && find(b, b",p=", 0).is_some() {
        // SCRAM client-final: ...,p=<proof>
        spans.push(value_span(b, rfind(b, b",p=").unwrap_or(0) + 3));
    } else if b.starts_with(b"v=") {
        // SCRAM server-final: v=<signature>
        spans.push(value_span(b, 2));
    } else if find(b, b"tokenauth=true", 0).is_some() && find(b, b",n=", 0).is_some() {
        // SCRAM client-first with a delegation token: n=<token id>
        spans.push(value_span(b, find(b, b",n=", 0).unwrap_or(0) + 3));
    } else if let Some(at) = find(&b.to_ascii_lowercase(), b"auth=bearer ", 0) {
        // OAUTHBEARER: n,,\x01auth=Bearer <token>\x01\x01
        let start = at + 12;
        let end = find(b, b"\x01", start).unwrap_or(b.len());
        spans.push((start, end - start));
    }
    spans.retain(|s| s.1 > 0);
    if spans.is_empty() {
        return (b.to_vec(), spans);
    }
    let mut out = Vec::with_capacity(b.len() + PLACEHOLDER.len());
    let mut prev = 0;
    for &(start, n) in &spans {
        out.extend_from_slice(&b[prev..start]);
        out.extend_from_slice(PLACEHOLDER);
        prev = start + n;
    }
    out.extend_from_slice(&b[prev..]);
    (out, spans)
}

/// A bytes value's bytes (a view into `frame`, or its own).
fn bytes_of<'a>(v: &'a Value, frame: &'a [u8]) -> Option<&'a [u8]> {
    match v {
        Value::View { start, end } => frame.get(*start..*end),
        Value::Bytes(b) => Some(b),
        _ => None,
    }
}

fn text_of<'a>(v: &'a Value, frame: &'a [u8]) -> Option<&'a [u8]> {
    match v {
        Value::Str(s) => Some(s.as_bytes()),
        Value::Text { start, end } => frame.get(*start..*end),
        _ => None,
    }
}

/// The secret fields of a body, wherever they sit, blanked.
fn blank_fields(v: &mut Value, keys: &[&str], frame: &[u8], found: &mut Found) {
    match v {
        Value::List(items) => {
            for item in items {
                blank_fields(item, keys, frame, found);
            }
        }
        Value::Struct(d) => {
            for (k, item) in d.iter_mut() {
                if keys.contains(&key_name(*k)) && *item != Value::None {
                    if let Some(secret) = text_of(item, frame) {
                        found.push((secret.to_vec(), vec![(0, secret.len())]));
                        *item = Value::Str(Rc::from(PLACEHOLDER_TEXT));
                    } else if let Some(secret) = bytes_of(item, frame) {
                        found.push((secret.to_vec(), vec![(0, secret.len())]));
                        *item = Value::Bytes(Rc::from(PLACEHOLDER));
                    }
                } else if matches!(item, Value::List(_) | Value::Struct(_)) {
                    blank_fields(item, keys, frame, found);
                }
            }
        }
        _ => {}
    }
}

/// Blank the secrets of one decoded body in place (api_key None: a raw SASL token body,
/// {"token": bytes}), its bytes fields read from `frame`. Returns what a caller stars in the
/// raw frame.
pub fn redact_body(api_key: Option<i16>, dir: Dir, body: &mut Value, frame: &[u8]) -> Found {
    let mut found = Found::new();
    let Value::Struct(d) = body else {
        return found;
    };
    if api_key == Some(ENVELOPE) {
        return envelope(dir, d, frame);
    }
    let token = match api_key {
        None => Some("token"),
        Some(SASL_AUTHENTICATE) => Some("AuthBytes"),
        Some(_) => None,
    };
    if let Some(name) = token {
        let key = key_id(name);
        if let Some((_, v)) = d.iter_mut().find(|(k, _)| *k == key) {
            if let Some(original) = bytes_of(v, frame).map(<[u8]>::to_vec) {
                let (redacted, spans) = redact_token(&original);
                *v = Value::Bytes(Rc::from(redacted));
                if !spans.is_empty() {
                    found.push((original, spans));
                }
            }
        }
        return found;
    }
    let keys = secret_fields(api_key.unwrap_or(-1), dir);
    if !keys.is_empty() {
        blank_fields(body, keys, frame, &mut found);
    }
    found
}

/// An Envelope's inner message redacted as itself, and the same bytes starred in its raw field.
/// An inner message that did not decode has every byte after its header starred when it may
/// hold a secret.
fn envelope(dir: Dir, d: &mut [(u32, Value)], frame: &[u8]) -> Found {
    let field = match dir {
        Dir::Request => "RequestData",
        Dir::Response => "ResponseData",
    };
    let (raw_key, inner_key) = (key_id(field), key_id(&format!("{field}Decoded")));
    let Some(raw) = d
        .iter()
        .find(|(k, _)| *k == raw_key)
        .and_then(|(_, v)| bytes_of(v, frame))
        .map(<[u8]>::to_vec)
    else {
        return Found::new();
    };
    let Some((_, Value::Struct(inner))) = d.iter_mut().find(|(k, _)| *k == inner_key) else {
        return Found::new();
    };
    let inner_key = match get(inner, K_API_KEY) {
        Some(Value::Int(k)) => Some(*k as i16),
        _ => None,
    };
    let found = match inner.iter_mut().find(|(k, _)| *k == K_BODY) {
        Some((_, b @ Value::Struct(_))) => redact_body(inner_key, dir, b, frame),
        _ => {
            // a request's header starts with its API key; a response's says nothing of its API
            let key = (raw.len() >= 2).then(|| i16::from_be_bytes([raw[0], raw[1]]));
            if dir == Dir::Request && !key.is_some_and(|k| SECRET_APIS.contains(&k)) {
                return Found::new();
            }
            let keep = if dir == Dir::Request { 8 } else { 4 };
            if raw.len() > keep {
                vec![(raw.clone(), vec![(keep, raw.len() - keep)])]
            } else {
                Found::new()
            }
        }
    };
    if !found.is_empty() {
        let starred = star_spans(&raw, &found);
        if let Some((_, v)) = d.iter_mut().find(|(k, _)| *k == raw_key) {
            *v = Value::Bytes(Rc::from(starred));
        }
    }
    found
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_keep_their_shape_and_lose_their_secret() {
        let (t, spans) = redact_token(b"\0alice\0hunter2");
        assert_eq!(t, b"\0alice\0<redacted>");
        assert_eq!(spans, vec![(7, 7)]);
        let (t, _) = redact_token(b"c=biws,r=abc,p=PROOF");
        assert_eq!(t, b"c=biws,r=abc,p=<redacted>");
        let (t, _) = redact_token(b"v=SIG");
        assert_eq!(t, b"v=<redacted>");
        let (t, _) = redact_token(b"n,,n=TOKENID,r=x,tokenauth=true");
        assert_eq!(t, b"n,,n=<redacted>,r=x,tokenauth=true");
        let (t, _) = redact_token(b"n,,\x01auth=Bearer abc.def\x01\x01");
        assert_eq!(t, b"n,,\x01auth=Bearer <redacted>\x01\x01");
        let (t, spans) = redact_token(b"r=nothing-secret");
        assert_eq!((t.as_slice(), spans.len()), (&b"r=nothing-secret"[..], 0));
    }

    #[test]
    fn a_raw_frame_keeps_its_length_with_the_secret_starred() {
        let raw = b"\x00\x24....\0alice\0hunter2";
        let found = vec![(b"\0alice\0hunter2".to_vec(), vec![(7, 7)])];
        assert_eq!(
            star_spans(raw, &found),
            b"\x00\x24....\0alice\0*******".to_vec()
        );
        assert_eq!(star_after(b"abcdef", 4), b"abcd**".to_vec());
        assert_eq!(star_after(b"abc", 4), b"abc".to_vec());
        assert_eq!(request_header_end(b"\0\x24\0\x02\0\0\0\x01\0\x03abcXX"), 13);
        assert_eq!(request_header_end(b"\0\x24\0\x02\0\0\0\x01\0\x09abc"), 10);
    }
}
