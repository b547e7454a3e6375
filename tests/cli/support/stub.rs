//! A loopback HTTP/1.1 stub server for provider tests: canned replies in
//! order (the last repeats) or from a closure, request capture, and faults
//! (status, Retry-After, delay before headers, stalls, drops mid-stream).

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use serde_json::Value;

/// A request as the stub received it.
#[derive(Debug, Clone)]
pub struct Captured {
    pub method: String,
    pub path: String,
    /// Header names lowercased.
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
    /// When the whole request had arrived.
    pub at: Instant,
}

impl Captured {
    pub fn json(&self) -> Value {
        serde_json::from_slice(&self.body).unwrap_or(Value::Null)
    }
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n == &name.to_ascii_lowercase())
            .map(|(_, v)| v.as_str())
    }
}

/// How a reply's body ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum End {
    /// The terminating chunk is sent.
    Complete,
    /// The connection is cut without the terminating chunk (a network drop).
    Drop,
    /// Nothing more is sent and the connection is held open for this long.
    Stall(Duration),
}

/// One canned reply.
#[derive(Debug, Clone)]
pub struct Reply {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    /// Wait before sending the status line.
    pub delay: Duration,
    /// Body pieces, each sent after its delay, as HTTP chunks.
    pub chunks: Vec<(Duration, Vec<u8>)>,
    pub end: End,
}

impl Reply {
    /// A JSON body with a status.
    pub fn json(status: u16, body: &Value) -> Reply {
        Reply {
            status,
            headers: vec![("content-type".into(), "application/json".into())],
            delay: Duration::ZERO,
            chunks: vec![(Duration::ZERO, body.to_string().into_bytes())],
            end: End::Complete,
        }
    }

    /// An SSE body from `data` payloads given as whole event texts
    /// (e.g. `"event: x\ndata: {...}\n\n"`).
    pub fn sse(events: Vec<String>) -> Reply {
        Reply {
            status: 200,
            headers: vec![("content-type".into(), "text/event-stream".into())],
            delay: Duration::ZERO,
            chunks: events
                .into_iter()
                .map(|e| (Duration::ZERO, e.into_bytes()))
                .collect(),
            end: End::Complete,
        }
    }

    /// An NDJSON body, one value a line.
    pub fn ndjson(lines: Vec<Value>) -> Reply {
        Reply {
            status: 200,
            headers: vec![("content-type".into(), "application/x-ndjson".into())],
            delay: Duration::ZERO,
            chunks: lines
                .into_iter()
                .map(|l| (Duration::ZERO, format!("{l}\n").into_bytes()))
                .collect(),
            end: End::Complete,
        }
    }

    /// An error status with a plain JSON error body.
    pub fn status(status: u16) -> Reply {
        Reply::json(
            status,
            &serde_json::json!({"error": {"message": format!("stub status {status}")}}),
        )
    }

    pub fn header(mut self, name: &str, value: &str) -> Reply {
        self.headers.push((name.to_string(), value.to_string()));
        self
    }

    pub fn delay(mut self, delay: Duration) -> Reply {
        self.delay = delay;
        self
    }

    pub fn end(mut self, end: End) -> Reply {
        self.end = end;
        self
    }

    /// Keeps only the first `n` chunks and then applies `end`.
    pub fn cut_after(mut self, n: usize, end: End) -> Reply {
        self.chunks.truncate(n);
        self.end = end;
        self
    }

    /// Delays every chunk after the first by `gap`.
    pub fn gaps(mut self, gap: Duration) -> Reply {
        for (i, chunk) in self.chunks.iter_mut().enumerate() {
            if i > 0 {
                chunk.0 = gap;
            }
        }
        self
    }
}

type Responder = dyn Fn(usize, &Captured) -> Reply + Send + Sync;

/// A running stub server. It stops accepting when dropped.
pub struct Stub {
    pub port: u16,
    captured: Arc<Mutex<Vec<Captured>>>,
}

impl Stub {
    /// Replies from a closure given the request's index (from 0).
    pub fn start(responder: impl Fn(usize, &Captured) -> Reply + Send + Sync + 'static) -> Stub {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind loopback");
        let port = listener.local_addr().unwrap().port();
        let captured = Arc::new(Mutex::new(Vec::new()));
        let responder: Arc<Responder> = Arc::new(responder);
        let seen = captured.clone();
        thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(stream) = stream else { continue };
                let responder = responder.clone();
                let seen = seen.clone();
                thread::spawn(move || serve(stream, &*responder, &seen));
            }
        });
        Stub { port, captured }
    }

    /// Replies in order; the last one repeats.
    pub fn sequence(replies: Vec<Reply>) -> Stub {
        assert!(!replies.is_empty());
        Stub::start(move |i, _| replies[i.min(replies.len() - 1)].clone())
    }

    /// `http://127.0.0.1:<port>`
    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    pub fn requests(&self) -> Vec<Captured> {
        self.captured.lock().unwrap().clone()
    }

    pub fn count(&self) -> usize {
        self.captured.lock().unwrap().len()
    }

    /// The time between each request and the one before it.
    pub fn gaps(&self) -> Vec<Duration> {
        let requests = self.captured.lock().unwrap();
        requests
            .windows(2)
            .map(|pair| pair[1].at.duration_since(pair[0].at))
            .collect()
    }
}

fn serve(stream: TcpStream, responder: &Responder, seen: &Mutex<Vec<Captured>>) {
    // Each reply is several small writes: without this, Nagle's algorithm
    // and the client's delayed ACK add ~40 ms to every request.
    let _ = stream.set_nodelay(true);
    let mut reader = BufReader::new(stream.try_clone().unwrap());
    let mut writer = stream;
    loop {
        let Some(request) = read_request(&mut reader) else {
            return;
        };
        let index = {
            let mut seen = seen.lock().unwrap();
            seen.push(request.clone());
            seen.len() - 1
        };
        let reply = responder(index, &request);
        if write_reply(&mut writer, &reply).is_err() {
            return;
        }
        if reply.end != End::Complete {
            return;
        }
    }
}

fn read_request(reader: &mut BufReader<TcpStream>) -> Option<Captured> {
    let mut line = String::new();
    if reader.read_line(&mut line).ok()? == 0 {
        return None;
    }
    let mut parts = line.split_whitespace();
    let method = parts.next()?.to_string();
    let path = parts.next()?.to_string();
    let mut headers = Vec::new();
    let mut length = 0usize;
    loop {
        let mut h = String::new();
        reader.read_line(&mut h).ok()?;
        let h = h.trim_end();
        if h.is_empty() {
            break;
        }
        if let Some((name, value)) = h.split_once(':') {
            let name = name.trim().to_ascii_lowercase();
            let value = value.trim().to_string();
            if name == "content-length" {
                length = value.parse().unwrap_or(0);
            }
            headers.push((name, value));
        }
    }
    let mut body = vec![0; length];
    reader.read_exact(&mut body).ok()?;
    Some(Captured {
        method,
        path,
        headers,
        body,
        at: Instant::now(),
    })
}

fn write_reply(w: &mut TcpStream, reply: &Reply) -> std::io::Result<()> {
    thread::sleep(reply.delay);
    let mut head = format!(
        "HTTP/1.1 {} Stub\r\ntransfer-encoding: chunked\r\n",
        reply.status
    );
    for (name, value) in &reply.headers {
        head.push_str(&format!("{name}: {value}\r\n"));
    }
    head.push_str("\r\n");
    w.write_all(head.as_bytes())?;
    w.flush()?;
    for (delay, chunk) in &reply.chunks {
        thread::sleep(*delay);
        if chunk.is_empty() {
            continue;
        }
        w.write_all(format!("{:x}\r\n", chunk.len()).as_bytes())?;
        w.write_all(chunk)?;
        w.write_all(b"\r\n")?;
        w.flush()?;
    }
    match reply.end {
        End::Complete => {
            w.write_all(b"0\r\n\r\n")?;
            w.flush()
        }
        End::Drop => {
            let _ = w.shutdown(std::net::Shutdown::Both);
            Ok(())
        }
        End::Stall(d) => {
            thread::sleep(d);
            let _ = w.shutdown(std::net::Shutdown::Both);
            Ok(())
        }
    }
}
