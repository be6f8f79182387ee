//! Just enough of the Redis protocol (RESP2) to probe and steer a server synchronously,
//! without an async runtime: one command, one reply.

use std::io::{BufRead, BufReader, Write};
use std::time::Duration;

/// A reply, flattened: simple strings, bulk strings and integers become text; arrays are
/// joined by newlines (enough for `INFO` and `ROLE`).
pub(crate) fn command(port: u16, args: &[&str]) -> Result<String, String> {
    command_timeout(port, args, Duration::from_secs(5))
}

/// [`command`] to the server called `server`, its failure a control error.
pub(crate) fn control(server: &str, port: u16, args: &[&str]) -> crate::Result<String> {
    command(port, args).map_err(|reason| crate::Error::Control {
        server: server.into(),
        action: "command",
        reason,
    })
}

/// [`command`], giving up on a silent (paused) server after `timeout`.
pub(crate) fn command_timeout(
    port: u16,
    args: &[&str],
    timeout: Duration,
) -> Result<String, String> {
    let stream = crate::ports::connect(port, timeout)?;
    let mut request = format!("*{}\r\n", args.len());
    for a in args {
        request.push_str(&format!("${}\r\n{a}\r\n", a.len()));
    }
    (&stream)
        .write_all(request.as_bytes())
        .map_err(|e| e.to_string())?;
    read_reply(&mut BufReader::new(stream))
}

fn read_reply(r: &mut impl BufRead) -> Result<String, String> {
    let mut line = String::new();
    r.read_line(&mut line).map_err(|e| e.to_string())?;
    let line = line.trim_end_matches("\r\n");
    let (kind, rest) = line.split_at(line.len().min(1));
    match kind {
        "+" | ":" => Ok(rest.to_string()),
        "-" => Err(rest.to_string()),
        "$" => {
            let len: i64 = rest
                .parse()
                .map_err(|_| format!("bad bulk length {rest}"))?;
            if len < 0 {
                return Ok(String::new());
            }
            let mut buf = vec![0; len as usize + 2];
            std::io::Read::read_exact(r, &mut buf).map_err(|e| e.to_string())?;
            buf.truncate(len as usize);
            String::from_utf8(buf).map_err(|e| e.to_string())
        }
        "*" => {
            let n: i64 = rest
                .parse()
                .map_err(|_| format!("bad array length {rest}"))?;
            let items: Result<Vec<_>, _> = (0..n.max(0)).map(|_| read_reply(r)).collect();
            Ok(items?.join("\n"))
        }
        "" => Err("connection closed".into()),
        other => Err(format!("unexpected reply type {other:?}")),
    }
}

/// The value of `field` in an `INFO` reply.
pub(crate) fn info_field(info: &str, field: &str) -> Option<String> {
    info.lines()
        .find_map(|l| l.strip_prefix(field)?.strip_prefix(':'))
        .map(|v| v.trim().to_string())
}
