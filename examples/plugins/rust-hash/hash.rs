//! hash: a Looopy tool plugin written in Rust, built with plain `rustc` for
//! wasm32-unknown-unknown (no crates, no WASI, no imports).
//!
//! It implements the Looopy ABI directly (docs/PLUGIN_ABI.md): exports
//! memory, looopy_abi_v1, looopy_alloc and looopy_call.
//!
//! Tool hash: the SHA-256 or FNV-1a (64-bit) digest of a text's UTF-8 bytes,
//! in lowercase hex.

use std::fmt::Write;

const OP_DESCRIBE: i32 = 0;
const OP_TOOL_CALL: i32 = 1;

// ---------------------------------------------------------------------------
// Memory handed to the host. A wasm32-unknown-unknown module is single
// threaded: the statics below are only ever touched by one call at a time.

/// Buffers from looopy_alloc, kept until the end of the next looopy_call.
static mut PENDING: Vec<Vec<u8>> = Vec::new();
/// The output of the last call, kept until the next call begins.
static mut OUTPUT: Vec<u8> = Vec::new();

#[no_mangle]
pub extern "C" fn looopy_abi_v1() {}

#[no_mangle]
pub extern "C" fn looopy_alloc(size: i32) -> i32 {
    if size < 0 {
        return 0;
    }
    let mut v = vec![0u8; size as usize];
    let ptr = v.as_mut_ptr() as i32;
    // Moving the Vec into PENDING does not move its heap buffer.
    unsafe { PENDING.push(v) };
    ptr
}

#[no_mangle]
pub extern "C" fn looopy_call(op: i32, ptr: i32, len: i32) -> i64 {
    let out = if len < 0 {
        fail("bad_input", "negative input length")
    } else {
        let input = unsafe { std::slice::from_raw_parts(ptr as usize as *const u8, len as usize) };
        match op {
            OP_DESCRIBE => ok(DESCRIBE.to_string()),
            OP_TOOL_CALL => tool_call(input),
            _ => fail("unsupported", "hash is a tool plugin: only describe (0) and tool call (1)"),
        }
    };
    unsafe {
        PENDING.clear();
        OUTPUT = out;
        ((OUTPUT.as_ptr() as u64) << 32 | OUTPUT.len() as u64) as i64
    }
}

const DESCRIBE: &str = concat!(
    r#"{"name":"rust-hash","version":"1.0.0","kind":"tool","tools":[{"#,
    r#""name":"hash","#,
    r#""description":"Computes the SHA-256 (default) or FNV-1a 64-bit digest of a text's UTF-8 bytes, as lowercase hex.","#,
    r#""parameters":{"type":"object","properties":{"#,
    r#""text":{"type":"string","description":"The text to hash."},"#,
    r#""algorithm":{"type":"string","enum":["sha256","fnv1a64"],"default":"sha256"}},"#,
    r#""required":["text"],"additionalProperties":false},"#,
    r#""idempotent":true}]}"#
);

fn ok(json: String) -> Vec<u8> {
    let mut v = Vec::with_capacity(json.len() + 1);
    v.push(0);
    v.extend_from_slice(json.as_bytes());
    v
}

fn fail(code: &str, message: &str) -> Vec<u8> {
    let mut s = String::from("{\"code\":");
    write_json_string(&mut s, code);
    s.push_str(",\"message\":");
    write_json_string(&mut s, message);
    s.push('}');
    let mut v = Vec::with_capacity(s.len() + 1);
    v.push(1);
    v.extend_from_slice(s.as_bytes());
    v
}

fn tool_result(content: &str, is_error: bool) -> Vec<u8> {
    let mut s = String::from("{\"content\":");
    write_json_string(&mut s, content);
    if is_error {
        s.push_str(",\"isError\":true");
    }
    s.push('}');
    ok(s)
}

fn tool_call(input: &[u8]) -> Vec<u8> {
    let req = match parse(input) {
        Ok(v) => v,
        Err(e) => return fail("bad_input", &format!("tool call request: {}", e)),
    };
    let call = match req.get("call") {
        Some(c @ Value::Object(_)) => c,
        _ => return fail("bad_input", "tool call request has no \"call\" object"),
    };
    let name = match call.get("name") {
        Some(Value::String(s)) => s.as_str(),
        _ => return fail("bad_input", "tool call has no \"name\""),
    };
    if name != "hash" {
        return fail("unknown_tool", &format!("unknown tool {:?}", name));
    }
    let empty = Value::Object(Vec::new());
    let args = match call.get("arguments") {
        None | Some(Value::Null) => &empty,
        Some(a @ Value::Object(_)) => a,
        Some(_) => return tool_result("arguments must be a JSON object", true),
    };
    let text = match args.get("text") {
        Some(Value::String(s)) => s,
        Some(_) => return tool_result("argument \"text\" must be a string", true),
        None => return tool_result("missing argument \"text\"", true),
    };
    let digest = match args.get("algorithm") {
        None | Some(Value::Null) => hex(&sha256(text.as_bytes())),
        Some(Value::String(a)) if a == "sha256" => hex(&sha256(text.as_bytes())),
        Some(Value::String(a)) if a == "fnv1a64" => format!("{:016x}", fnv1a64(text.as_bytes())),
        Some(Value::String(a)) => {
            return tool_result(&format!("unknown algorithm {:?}: use sha256 or fnv1a64", a), true)
        }
        Some(_) => return tool_result("argument \"algorithm\" must be a string", true),
    };
    tool_result(&digest, false)
}

fn hex(bytes: &[u8]) -> String {
    let mut s = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        let _ = write!(s, "{:02x}", b);
    }
    s
}

// ---------------------------------------------------------------------------
// Digests.

fn fnv1a64(data: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf29ce484222325;
    for &b in data {
        h ^= b as u64;
        h = h.wrapping_mul(0x100000001b3);
    }
    h
}

const K: [u32; 64] = [
    0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5,
    0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174,
    0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da,
    0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967,
    0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85,
    0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070,
    0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
    0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2,
];

fn sha256(data: &[u8]) -> [u8; 32] {
    let mut h: [u32; 8] = [
        0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a, 0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19,
    ];
    // Whole blocks straight from the input, then the padded tail: the rest,
    // a 0x80 byte, zeros, and the bit length (one or two blocks).
    let full = data.len() / 64 * 64;
    for block in data[..full].chunks_exact(64) {
        compress(&mut h, block);
    }
    let rest = &data[full..];
    let mut tail = [0u8; 128];
    tail[..rest.len()].copy_from_slice(rest);
    tail[rest.len()] = 0x80;
    let n = if rest.len() < 56 { 64 } else { 128 };
    tail[n - 8..n].copy_from_slice(&((data.len() as u64).wrapping_mul(8)).to_be_bytes());
    for block in tail[..n].chunks_exact(64) {
        compress(&mut h, block);
    }
    let mut out = [0u8; 32];
    for (i, x) in h.iter().enumerate() {
        out[4 * i..4 * i + 4].copy_from_slice(&x.to_be_bytes());
    }
    out
}

fn compress(h: &mut [u32; 8], block: &[u8]) {
    let mut w = [0u32; 64];
    for i in 0..16 {
        w[i] = u32::from_be_bytes([block[4 * i], block[4 * i + 1], block[4 * i + 2], block[4 * i + 3]]);
    }
    for i in 16..64 {
        let s0 = w[i - 15].rotate_right(7) ^ w[i - 15].rotate_right(18) ^ (w[i - 15] >> 3);
        let s1 = w[i - 2].rotate_right(17) ^ w[i - 2].rotate_right(19) ^ (w[i - 2] >> 10);
        w[i] = w[i - 16].wrapping_add(s0).wrapping_add(w[i - 7]).wrapping_add(s1);
    }
    let [mut a, mut b, mut c, mut d, mut e, mut f, mut g, mut hh] = *h;
    for i in 0..64 {
        let s1 = e.rotate_right(6) ^ e.rotate_right(11) ^ e.rotate_right(25);
        let ch = (e & f) ^ (!e & g);
        let t1 = hh.wrapping_add(s1).wrapping_add(ch).wrapping_add(K[i]).wrapping_add(w[i]);
        let s0 = a.rotate_right(2) ^ a.rotate_right(13) ^ a.rotate_right(22);
        let maj = (a & b) ^ (a & c) ^ (b & c);
        let t2 = s0.wrapping_add(maj);
        hh = g;
        g = f;
        f = e;
        e = d.wrapping_add(t1);
        d = c;
        c = b;
        b = a;
        a = t1.wrapping_add(t2);
    }
    for (x, y) in h.iter_mut().zip([a, b, c, d, e, f, g, hh]) {
        *x = x.wrapping_add(y);
    }
}

// ---------------------------------------------------------------------------
// A small JSON parser (RFC 8259), enough for the requests a tool receives.

enum Value {
    Null,
    Bool(bool),
    Number(f64),
    String(String),
    Array(Vec<Value>),
    Object(Vec<(String, Value)>),
}

impl Value {
    /// The value of member key, when self is an object that has it.
    fn get(&self, key: &str) -> Option<&Value> {
        match self {
            Value::Object(members) => members.iter().rev().find(|(k, _)| k == key).map(|(_, v)| v),
            _ => None,
        }
    }
}

struct Parser<'a> {
    s: &'a [u8],
    i: usize,
    depth: usize,
}

fn parse(s: &[u8]) -> Result<Value, String> {
    let mut p = Parser { s, i: 0, depth: 0 };
    let v = p.value()?;
    p.ws();
    if p.i != s.len() {
        return Err(format!("unexpected data after the JSON value at offset {}", p.i));
    }
    Ok(v)
}

impl<'a> Parser<'a> {
    fn ws(&mut self) {
        while self.i < self.s.len() && matches!(self.s[self.i], b' ' | b'\t' | b'\n' | b'\r') {
            self.i += 1;
        }
    }

    fn err<T>(&self, what: &str) -> Result<T, String> {
        if self.i >= self.s.len() {
            Err(format!("{} at the end of the input", what))
        } else {
            Err(format!("{} at offset {}", what, self.i))
        }
    }

    fn eat(&mut self, lit: &[u8]) -> bool {
        if self.s[self.i..].starts_with(lit) {
            self.i += lit.len();
            true
        } else {
            false
        }
    }

    fn value(&mut self) -> Result<Value, String> {
        self.ws();
        match self.s.get(self.i) {
            None => self.err("expected a value"),
            Some(b'{') => self.object(),
            Some(b'[') => self.array(),
            Some(b'"') => Ok(Value::String(self.string()?)),
            Some(b't') if self.eat(b"true") => Ok(Value::Bool(true)),
            Some(b'f') if self.eat(b"false") => Ok(Value::Bool(false)),
            Some(b'n') if self.eat(b"null") => Ok(Value::Null),
            Some(b'-') | Some(b'0'..=b'9') => self.number(),
            Some(_) => self.err("unexpected character"),
        }
    }

    fn nest(&mut self) -> Result<(), String> {
        self.depth += 1;
        if self.depth > 64 {
            return self.err("nested too deeply");
        }
        Ok(())
    }

    fn object(&mut self) -> Result<Value, String> {
        self.nest()?;
        self.i += 1;
        let mut members = Vec::new();
        self.ws();
        if self.eat(b"}") {
            self.depth -= 1;
            return Ok(Value::Object(members));
        }
        loop {
            self.ws();
            if self.s.get(self.i) != Some(&b'"') {
                return self.err("expected a member name");
            }
            let k = self.string()?;
            self.ws();
            if !self.eat(b":") {
                return self.err("expected ':'");
            }
            let v = self.value()?;
            members.push((k, v));
            self.ws();
            if self.eat(b",") {
                continue;
            }
            if self.eat(b"}") {
                self.depth -= 1;
                return Ok(Value::Object(members));
            }
            return self.err("expected ',' or '}'");
        }
    }

    fn array(&mut self) -> Result<Value, String> {
        self.nest()?;
        self.i += 1;
        let mut items = Vec::new();
        self.ws();
        if self.eat(b"]") {
            self.depth -= 1;
            return Ok(Value::Array(items));
        }
        loop {
            items.push(self.value()?);
            self.ws();
            if self.eat(b",") {
                continue;
            }
            if self.eat(b"]") {
                self.depth -= 1;
                return Ok(Value::Array(items));
            }
            return self.err("expected ',' or ']'");
        }
    }

    fn number(&mut self) -> Result<Value, String> {
        let start = self.i;
        self.eat(b"-");
        let digits = |p: &mut Parser| {
            let d = p.i;
            while p.i < p.s.len() && p.s[p.i].is_ascii_digit() {
                p.i += 1;
            }
            p.i > d
        };
        if !digits(self) {
            return self.err("expected a digit");
        }
        if self.eat(b".") && !digits(self) {
            return self.err("expected a digit after '.'");
        }
        if self.eat(b"e") || self.eat(b"E") {
            if !self.eat(b"+") {
                self.eat(b"-");
            }
            if !digits(self) {
                return self.err("expected an exponent");
            }
        }
        let text = std::str::from_utf8(&self.s[start..self.i]).unwrap_or("");
        match text.parse::<f64>() {
            Ok(n) => Ok(Value::Number(n)),
            Err(_) => Err(format!("bad number at offset {}", start)),
        }
    }

    fn hex4(&mut self) -> Result<u32, String> {
        if self.i + 4 > self.s.len() {
            return self.err("short \\u escape");
        }
        let mut v = 0u32;
        for k in 0..4 {
            let d = match (self.s[self.i + k] as char).to_digit(16) {
                Some(d) => d,
                None => return self.err("bad \\u escape"),
            };
            v = v << 4 | d;
        }
        self.i += 4;
        Ok(v)
    }

    fn string(&mut self) -> Result<String, String> {
        self.i += 1; // opening quote
        let mut out: Vec<u8> = Vec::new();
        loop {
            let c = match self.s.get(self.i) {
                None => return self.err("unterminated string"),
                Some(&c) => c,
            };
            self.i += 1;
            match c {
                b'"' => break,
                b'\\' => {
                    let e = match self.s.get(self.i) {
                        None => return self.err("unterminated escape"),
                        Some(&e) => e,
                    };
                    self.i += 1;
                    match e {
                        b'"' => out.push(b'"'),
                        b'\\' => out.push(b'\\'),
                        b'/' => out.push(b'/'),
                        b'b' => out.push(8),
                        b'f' => out.push(12),
                        b'n' => out.push(b'\n'),
                        b'r' => out.push(b'\r'),
                        b't' => out.push(b'\t'),
                        b'u' => {
                            let mut cp = self.hex4()?;
                            if (0xD800..0xDC00).contains(&cp) && self.s[self.i..].starts_with(b"\\u") {
                                let save = self.i;
                                self.i += 2;
                                let lo = self.hex4()?;
                                if (0xDC00..0xE000).contains(&lo) {
                                    cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
                                } else {
                                    self.i = save;
                                }
                            }
                            let ch = char::from_u32(cp).unwrap_or('\u{FFFD}');
                            let mut tmp = [0u8; 4];
                            out.extend_from_slice(ch.encode_utf8(&mut tmp).as_bytes());
                        }
                        _ => {
                            self.i -= 1;
                            return self.err("bad escape");
                        }
                    }
                }
                0..=0x1F => {
                    self.i -= 1;
                    return self.err("control character in string");
                }
                _ => {
                    // The run of plain bytes up to the next quote, escape or
                    // control character, in one copy.
                    let start = self.i - 1;
                    while self.i < self.s.len() && !matches!(self.s[self.i], b'"' | b'\\' | 0..=0x1F) {
                        self.i += 1;
                    }
                    out.extend_from_slice(&self.s[start..self.i]);
                }
            }
        }
        String::from_utf8(out).map_err(|_| "string is not valid UTF-8".to_string())
    }
}

fn write_json_string(s: &mut String, v: &str) {
    s.push('"');
    for c in v.chars() {
        match c {
            '"' => s.push_str("\\\""),
            '\\' => s.push_str("\\\\"),
            '\n' => s.push_str("\\n"),
            '\r' => s.push_str("\\r"),
            '\t' => s.push_str("\\t"),
            c if (c as u32) < 0x20 => {
                let _ = write!(s, "\\u{:04x}", c as u32);
            }
            c => s.push(c),
        }
    }
    s.push('"');
}
