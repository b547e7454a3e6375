//! The `--json` sink: one JSON object per line on stdout.

use std::io::{self, Write};

use super::{EventRecord, Sink};

/// Writes each event's JSON on its own line and flushes it, so a consumer
/// sees every event as it happens. A closed stdout is ignored.
pub(crate) struct JsonlSink<W: Write + Send> {
    out: W,
}

impl JsonlSink<io::Stdout> {
    pub(crate) fn stdout() -> Self {
        JsonlSink { out: io::stdout() }
    }
}

impl<W: Write + Send> Sink for JsonlSink<W> {
    fn handle(&mut self, record: &EventRecord) {
        let mut line = record.json.to_string();
        line.push('\n');
        let _ = self.out.write_all(line.as_bytes());
        let _ = self.out.flush();
    }
}
