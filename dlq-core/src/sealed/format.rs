//! The bytes of a seal. Envelope v2 (AES-256-GCM): `v2:<key id>:<base64 of nonce, ciphertext
//! and tag>`, the associated data `dlq-sealed:v2 NUL <purpose> NUL <event type> NUL <key id>`;
//! a payload's plaintext is the failure text sealed with it (a 4-byte big-endian length, then
//! the text; length 0 for none) followed by the payload (a tag, `J`son, `R`aw or `T`runcated
//! raw, then its content). A failure text is its reason, its stack trace and its chain, each a
//! 4-byte length and UTF-8 (the stack trace after a byte saying whether there is one, the
//! chain after its count). Envelope v1 (XChaCha20-Poly1305, a JSON object with a base64 nonce
//! and data, its payload's plaintext the payload alone, its failure's a JSON object) still opens.

use base64::Engine as _;
use serde_json::{Map, Value};

use super::{B64, KeyRing, SealError};
use crate::classify::FailureInfo;
use crate::record::{Payload, Truncation};

/// What a seal holds, in its associated data.
pub(super) const PAYLOAD: &str = "payload";
pub(super) const FAILURE: &str = "failure";
const NONCE: usize = 12;
const TAG: usize = 16;

/// A plaintext being built, then sealed (as often as needed: it is not consumed).
pub(super) struct Plain {
    buf: Vec<u8>,
}

impl Plain {
    pub(super) fn new() -> Self {
        Self { buf: Vec::with_capacity(512) }
    }

    /// A failure's text alone (a failure sealed on its own).
    pub(super) fn failure(failure: &FailureInfo) -> Self {
        let mut plain = Self::new();
        encode_failure(&mut plain.buf, failure);
        plain
    }

    pub(super) fn len(&self) -> usize {
        self.buf.len()
    }

    /// Appends the failure part of a payload's plaintext from a failure text's bytes.
    pub(super) fn push_failure(&mut self, text: &[u8]) {
        self.buf.extend_from_slice(&u32::try_from(text.len()).unwrap_or(u32::MAX).to_be_bytes());
        self.buf.extend_from_slice(text);
    }

    /// Appends the failure part of a payload's plaintext from `failure`; returns where it starts.
    pub(super) fn push_failure_of(&mut self, failure: &FailureInfo) -> usize {
        let at = self.buf.len();
        self.buf.extend_from_slice(&[0; 4]);
        encode_failure(&mut self.buf, failure);
        let len = u32::try_from(self.buf.len() - at - 4).unwrap_or(u32::MAX);
        self.buf[at..at + 4].copy_from_slice(&len.to_be_bytes());
        at
    }

    /// Empties the failure part that starts at `at` (a payload sealed without its failure).
    pub(super) fn clear_failure(&mut self, at: usize) {
        let len = self.buf.get(at..at + 4).and_then(|b| b.try_into().ok()).map_or(0, u32::from_be_bytes);
        self.buf.drain(at + 4..at + 4 + len as usize);
        self.buf[at..at + 4].copy_from_slice(&[0; 4]);
    }

    /// Appends `payload`; returns where it starts.
    pub(super) fn push_payload(&mut self, payload: &Payload) -> usize {
        let at = self.buf.len();
        encode_payload(&mut self.buf, payload);
        at
    }

    /// Appends bytes as they are (an opened payload part).
    pub(super) fn push_raw(&mut self, bytes: &[u8]) {
        self.buf.extend_from_slice(bytes);
    }

    pub(super) fn truncate(&mut self, len: usize) {
        self.buf.truncate(len);
    }

    /// The plaintext sealed under the ring's active key for `purpose` of `event_type`, with a
    /// fresh random nonce: `v2:<key id>:<base64>`.
    pub(super) fn seal(&self, ring: &KeyRing, purpose: &str, event_type: &str) -> Result<String, SealError> {
        use aes_gcm::aead::AeadInOut as _;
        use rand::Rng as _;
        let (id, key) = ring.active_key();
        let mut blob = Vec::with_capacity(NONCE + self.buf.len() + TAG);
        let mut nonce = [0; NONCE];
        rand::rng().fill_bytes(&mut nonce);
        blob.extend_from_slice(&nonce);
        blob.extend_from_slice(&self.buf);
        let tag = key
            .aead
            .encrypt_inout_detached(&nonce.into(), &aad(purpose, event_type, id), blob[NONCE..].as_mut().into())
            .map_err(|_| too_long())?;
        blob.extend_from_slice(&tag);
        // Base64 into a buffer of the right size at once (`encode_string` goes in chunks).
        let mut text = Vec::with_capacity(4 + id.len() + blob.len().div_ceil(3) * 4);
        text.extend_from_slice(b"v2:");
        text.extend_from_slice(id.as_bytes());
        text.push(b':');
        let at = text.len();
        text.resize(at + base64::encoded_len(blob.len(), true).unwrap_or(0), 0);
        let written = B64.encode_slice(&blob, &mut text[at..]).map_err(|_| too_long())?;
        text.truncate(at + written);
        String::from_utf8(text).map_err(|_| too_long())
    }
}

fn too_long() -> SealError {
    SealError::Malformed { reason: "the value is too long to seal".into() }
}

/// The associated data of a v2 seal: what it is, of which event type, under which key.
fn aad(purpose: &str, event_type: &str, key: &str) -> Vec<u8> {
    const HEAD: &[u8] = b"dlq-sealed:v2\0";
    let mut aad = Vec::with_capacity(HEAD.len() + purpose.len() + event_type.len() + key.len() + 2);
    aad.extend_from_slice(HEAD);
    aad.extend_from_slice(purpose.as_bytes());
    aad.push(0);
    aad.extend_from_slice(event_type.as_bytes());
    aad.push(0);
    aad.extend_from_slice(key.as_bytes());
    aad
}

/// A sealed value as stored.
#[derive(Clone, Copy)]
pub(super) enum Body<'a> {
    /// Envelope v1's fields (`nonce`, `data`).
    V1(&'a Map<String, Value>),
    /// Envelope v2's base64 text.
    V2(&'a str),
}

impl Body<'_> {
    /// Opens a payload's seal under key `id`.
    pub(super) fn open(self, ring: &KeyRing, event_type: &str, id: &str) -> Result<Opened, SealError> {
        self.open_as(ring, PAYLOAD, event_type, id)
    }

    pub(super) fn open_as(
        self,
        ring: &KeyRing,
        purpose: &str,
        event_type: &str,
        id: &str,
    ) -> Result<Opened, SealError> {
        use aes_gcm::aead::AeadInOut as _;
        match self {
            Body::V2(data) => {
                let key = ring.key(id)?;
                let mut blob = B64
                    .decode(data)
                    .map_err(|_| SealError::Malformed { reason: "its data is not valid base64".into() })?;
                let Some(end) = blob.len().checked_sub(TAG).filter(|&end| end >= NONCE) else {
                    return Err(SealError::Malformed { reason: "its data is too short".into() });
                };
                let (head, tag) = blob.split_at_mut(end);
                let (nonce, body) = head.split_at_mut(NONCE);
                let nonce: [u8; NONCE] =
                    (&*nonce).try_into().map_err(|_| SealError::Malformed { reason: "no nonce".into() })?;
                let tag: [u8; TAG] =
                    (&*tag).try_into().map_err(|_| SealError::Malformed { reason: "no tag".into() })?;
                key.aead
                    .decrypt_inout_detached(&nonce.into(), &aad(purpose, event_type, id), body.into(), &tag.into())
                    .map_err(|_| SealError::Unauthentic { key: id.to_owned() })?;
                Ok(Opened { bytes: blob, start: NONCE, end, v1: false })
            }
            Body::V1(inner) => {
                let field = |name: &str| {
                    inner
                        .get(name)
                        .and_then(Value::as_str)
                        .ok_or_else(|| SealError::Malformed { reason: format!("no `{name}`") })
                };
                let bytes = open_v1(ring, purpose, event_type, id, field("nonce")?, field("data")?)?;
                let end = bytes.len();
                Ok(Opened { bytes, start: 0, end, v1: true })
            }
        }
    }
}

/// An opened seal's plaintext.
pub(super) struct Opened {
    bytes: Vec<u8>,
    start: usize,
    end: usize,
    /// Envelope v1: a payload's plaintext is the payload alone.
    v1: bool,
}

impl Opened {
    pub(super) fn bytes(&self) -> &[u8] {
        &self.bytes[self.start..self.end]
    }

    fn split(&self) -> Result<(&[u8], &[u8]), SealError> {
        let bytes = self.bytes();
        if self.v1 {
            return Ok((&[], bytes));
        }
        let mut reader = Reader(bytes);
        let failure = reader.chunk()?;
        Ok((failure, reader.0))
    }

    /// The failure text sealed with a payload (empty for none).
    pub(super) fn failure_part(&self) -> Result<&[u8], SealError> {
        Ok(self.split()?.0)
    }

    /// A payload's encoded bytes.
    pub(super) fn payload_part(&self) -> Result<&[u8], SealError> {
        Ok(self.split()?.1)
    }

    pub(super) fn payload(self) -> Result<Payload, SealError> {
        decode_payload(self.payload_part()?)
    }
}

/// Opens an envelope v1 seal (XChaCha20-Poly1305).
pub(super) fn open_v1(
    ring: &KeyRing,
    purpose: &str,
    event_type: &str,
    id: &str,
    nonce: &str,
    data: &str,
) -> Result<Vec<u8>, SealError> {
    use chacha20poly1305::aead::{Aead, KeyInit, Payload as Aad};
    use chacha20poly1305::{XChaCha20Poly1305, XNonce};
    let key = ring.key(id)?;
    let malformed = |what: &str| SealError::Malformed { reason: format!("its {what} is not valid base64") };
    let nonce = B64.decode(nonce).map_err(|_| malformed("nonce"))?;
    let nonce = XNonce::try_from(nonce.as_slice())
        .map_err(|_| SealError::Malformed { reason: "its nonce is not 24 bytes".into() })?;
    let data = B64.decode(data).map_err(|_| malformed("data"))?;
    let cipher = XChaCha20Poly1305::new(&key.bytes.into());
    let aad = format!("dlq-sealed:v1\0{purpose}\0{event_type}\0{id}").into_bytes();
    cipher.decrypt(&nonce, Aad { msg: &data, aad: &aad }).map_err(|_| SealError::Unauthentic { key: id.to_owned() })
}

/// A payload as bytes: a tag (`J`son, `R`aw, `T`runcated raw), then its content.
fn encode_payload(out: &mut Vec<u8>, payload: &Payload) {
    match payload {
        Payload::Json(value) => {
            out.push(b'J');
            // Serializing a `Value` into memory cannot fail: its map keys are strings.
            let _ = serde_json::to_writer(&mut *out, value);
        }
        Payload::Raw { bytes, truncated: None } => {
            out.push(b'R');
            out.extend_from_slice(bytes);
        }
        Payload::Raw { bytes, truncated: Some(t) } => {
            out.push(b'T');
            out.extend_from_slice(&t.original_len.to_be_bytes());
            let sha = format!("{:<64}", t.original_sha256);
            out.extend_from_slice(&sha.as_bytes()[..64]);
            out.extend_from_slice(bytes);
        }
    }
}

fn decode_payload(bytes: &[u8]) -> Result<Payload, SealError> {
    let malformed = || SealError::Malformed { reason: "the opened payload is not in dlq's form".into() };
    match bytes.first() {
        Some(b'J') => serde_json::from_slice(&bytes[1..]).map(Payload::Json).map_err(|_| malformed()),
        Some(b'R') => Ok(Payload::Raw { bytes: bytes[1..].to_vec(), truncated: None }),
        Some(b'T') if bytes.len() >= 73 => {
            let len = u64::from_be_bytes(bytes[1..9].try_into().map_err(|_| malformed())?);
            let sha = std::str::from_utf8(&bytes[9..73]).map_err(|_| malformed())?.trim_end().to_owned();
            Ok(Payload::Raw {
                bytes: bytes[73..].to_vec(),
                truncated: Some(Truncation { original_len: len, original_sha256: sha }),
            })
        }
        _ => Err(malformed()),
    }
}

/// The texts of a failure, opened.
pub(super) struct Texts {
    pub(super) reason: String,
    pub(super) chain: Vec<String>,
    pub(super) stacktrace: Option<String>,
}

fn put(out: &mut Vec<u8>, text: &str) {
    out.extend_from_slice(&u32::try_from(text.len()).unwrap_or(u32::MAX).to_be_bytes());
    out.extend_from_slice(text.as_bytes());
}

fn encode_failure(out: &mut Vec<u8>, failure: &FailureInfo) {
    put(out, &failure.reason);
    match &failure.stacktrace {
        Some(trace) => {
            out.push(1);
            put(out, trace);
        }
        None => out.push(0),
    }
    out.extend_from_slice(&u32::try_from(failure.chain.len()).unwrap_or(u32::MAX).to_be_bytes());
    for link in &failure.chain {
        put(out, link);
    }
}

/// Reads lengths and chunks off the front of a plaintext.
struct Reader<'a>(&'a [u8]);

impl<'a> Reader<'a> {
    fn malformed() -> SealError {
        SealError::Malformed { reason: "the opened value is not in dlq's form".into() }
    }

    fn take(&mut self, n: usize) -> Result<&'a [u8], SealError> {
        if self.0.len() < n {
            return Err(Self::malformed());
        }
        let (head, rest) = self.0.split_at(n);
        self.0 = rest;
        Ok(head)
    }

    fn len(&mut self) -> Result<usize, SealError> {
        let bytes: [u8; 4] = self.take(4)?.try_into().map_err(|_| Self::malformed())?;
        Ok(u32::from_be_bytes(bytes) as usize)
    }

    fn chunk(&mut self) -> Result<&'a [u8], SealError> {
        let n = self.len()?;
        self.take(n)
    }

    fn text(&mut self) -> Result<String, SealError> {
        let chunk = self.chunk()?;
        std::str::from_utf8(chunk).map(str::to_owned).map_err(|_| Self::malformed())
    }
}

pub(super) fn decode_failure(bytes: &[u8]) -> Result<Texts, SealError> {
    let mut reader = Reader(bytes);
    let reason = reader.text()?;
    let stacktrace = match reader.take(1)? {
        [0] => None,
        _ => Some(reader.text()?),
    };
    let links = reader.len()?;
    // Each link takes at least its 4-byte length: a count past that is not dlq's.
    if links > reader.0.len() / 4 {
        return Err(Reader::malformed());
    }
    let chain = (0..links).map(|_| reader.text()).collect::<Result<_, _>>()?;
    Ok(Texts { reason, chain, stacktrace })
}

/// Envelope v1's failure text: a JSON object.
pub(super) fn decode_failure_v1(bytes: &[u8]) -> Result<Texts, SealError> {
    let opened: Value = serde_json::from_slice(bytes)
        .map_err(|_| SealError::Malformed { reason: "the opened failure is not JSON".into() })?;
    let text = |v: &Value| v.as_str().map(str::to_owned);
    Ok(Texts {
        reason: opened.get("reason").and_then(text).unwrap_or_default(),
        chain: opened
            .get("chain")
            .and_then(Value::as_array)
            .map(|c| c.iter().filter_map(text).collect())
            .unwrap_or_default(),
        stacktrace: opened.get("stacktrace").and_then(text),
    })
}
