//! The lines of the items that reach Python as objects (file faults, exchanges with secrets to
//! redact, bodies only Python decoded), written by render.rs like every other line: `Lines`
//! takes the (redacted) Python item and gives its text or jsonl line with the same options.
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict, PyString};

use crate::json::json_str;
use crate::render::{clock_text, dropped_raw_body, Render, TextFields, RECORD_APIS};

#[pyclass(unsendable, module = "dissector._native")]
pub struct Lines {
    render: Render,
    text: bool,
}

/// An attribute that is None or an int.
fn opt_int(item: &Bound<'_, PyAny>, name: &str) -> PyResult<Option<i64>> {
    item.getattr(name)?.extract()
}

fn as_bytes(v: &Bound<'_, PyAny>) -> PyResult<Option<Vec<u8>>> {
    if v.is_none() {
        return Ok(None);
    }
    if let Ok(b) = v.cast::<PyBytes>() {
        return Ok(Some(b.as_bytes().to_vec()));
    }
    let b = <PyBytes as pyo3::PyTypeInfo>::type_object(v.py()).call1((v,))?;
    Ok(Some(b.cast::<PyBytes>()?.as_bytes().to_vec()))
}

/// An exact dict holding `key` (output's `type(body) is dict and key in body`).
fn dict_with(body: &Bound<'_, PyAny>, key: &str) -> PyResult<bool> {
    Ok(body.is_exact_instance_of::<PyDict>() && body.cast::<PyDict>()?.contains(key)?)
}

#[pymethods]
impl Lines {
    /// fmt: "text" or "jsonl"; the options as `kafkawire dissect`'s.
    #[new]
    #[pyo3(signature = (fmt, records=false, raw=false, no_payloads=false))]
    fn new(
        py: Python<'_>,
        fmt: &str,
        records: bool,
        raw: bool,
        no_payloads: bool,
    ) -> PyResult<Self> {
        if fmt != "text" && fmt != "jsonl" {
            return Err(pyo3::exceptions::PyValueError::new_err(format!(
                "no native rendering for {fmt}"
            )));
        }
        let mut render = Render::new(py)?;
        render.set_options(py, records, raw, no_payloads, None)?;
        Ok(Lines {
            render,
            text: fmt == "text",
        })
    }

    /// One item's line, newline included (output.format_text's or output._Encoder.line's);
    /// topics: dissector.topics.topics(item), for an exchange's text line.
    #[pyo3(signature = (item, topics=None))]
    fn line<'py>(
        &mut self,
        py: Python<'py>,
        item: &Bound<'py, PyAny>,
        topics: Option<Vec<String>>,
    ) -> PyResult<Bound<'py, PyBytes>> {
        let kind = item.getattr("type")?;
        let kind = kind.cast::<PyString>()?.to_str()?.to_owned();
        let mut out = Vec::with_capacity(256);
        if kind == "anomaly" {
            if self.text {
                let mut line = String::new();
                clock_text(&mut self.render, &mut line, item.getattr("ts")?.extract()?);
                line.push_str(" ANOMALY");
                let conn = item.getattr("connection")?;
                if !conn.is_none() {
                    line.push_str(" conn=");
                    line.push_str(conn.str()?.to_str()?);
                }
                line.push(' ');
                line.push_str(item.getattr("kind")?.str()?.to_str()?);
                line.push_str(": ");
                line.push_str(item.getattr("detail")?.str()?.to_str()?);
                line.push('\n');
                out = line.into_bytes();
            } else {
                out.extend_from_slice(b"{\"type\":\"anomaly\",\"connection\":");
                self.render
                    .py_json(py, &mut out, &item.getattr("connection")?, false)?;
                out.extend_from_slice(b",\"ts\":");
                self.render
                    .py_json(py, &mut out, &item.getattr("ts")?, false)?;
                out.extend_from_slice(b",\"kind\":");
                self.render
                    .py_json(py, &mut out, &item.getattr("kind")?, false)?;
                out.extend_from_slice(b",\"detail\":");
                self.render
                    .py_json(py, &mut out, &item.getattr("detail")?, false)?;
                out.extend_from_slice(b"}\n");
            }
        } else if self.text {
            let ts: Option<f64> = item.getattr("ts")?.extract()?;
            let ts = match ts {
                Some(t) => Some(t),
                None => item.getattr("response_ts")?.extract()?,
            };
            let client = item.getattr("client")?.str()?;
            let broker = item.getattr("broker")?.str()?;
            let api_name: Option<String> = item.getattr("api_name")?.extract()?;
            let client_id: Option<String> = item.getattr("client_id")?.extract()?;
            let status: String = item.getattr("status")?.extract()?;
            let errors: Vec<i64> = item.getattr("error_codes")?.extract()?;
            let flags: Vec<String> = item.getattr("flags")?.extract()?;
            let flags: Vec<&str> = flags.iter().map(|f| f.as_str()).collect();
            let topics = topics.unwrap_or_default();
            let topics: Vec<&str> = topics.iter().map(|t| t.as_str()).collect();
            let detail = self.envelope_detail(item)?;
            let mut line = self.render.text_line(&TextFields {
                ts,
                client: client.to_str()?,
                broker: broker.to_str()?,
                api_name: api_name.as_deref().unwrap_or(""),
                api_version: opt_int(item, "api_version")?,
                correlation_id: opt_int(item, "correlation_id")?,
                latency_ms: item.getattr("latency_ms")?.extract()?,
                client_id: client_id.as_deref(),
                topics: &topics,
                detail: detail.as_deref(),
                status: &status,
                errors: &errors,
                flags: &flags,
            });
            line.push('\n');
            out = line.into_bytes();
        } else {
            self.exchange_json(py, item, &mut out)?;
        }
        Ok(PyBytes::new(py, &out))
    }
}

impl Lines {
    /// nested::summary's `inner=API vN` for an Envelope Python holds (Envelopes go to Python to
    /// have the secrets of what they carry redacted); the other summaries' APIs stay native.
    fn envelope_detail(&self, item: &Bound<'_, PyAny>) -> PyResult<Option<String>> {
        if opt_int(item, "api_key")? != Some(crate::config::api::ENVELOPE as i64) {
            return Ok(None);
        }
        let request = item.getattr("request")?;
        let Ok(inner) = request.get_item("RequestDataDecoded") else {
            return Ok(None);
        };
        let (Ok(k), Ok(v)) = (inner.get_item("api_key"), inner.get_item("api_version")) else {
            return Ok(None);
        };
        let (k, v): (i16, i64) = (k.extract()?, v.extract()?);
        Ok(Some(crate::nested::inner(k, v, |k| {
            self.render.api_name(k)
        })))
    }

    /// output._Encoder.line for an exchange
    fn exchange_json(
        &mut self,
        py: Python<'_>,
        item: &Bound<'_, PyAny>,
        out: &mut Vec<u8>,
    ) -> PyResult<()> {
        let api_key = opt_int(item, "api_key")?;
        let record_api = api_key.is_some_and(|k| RECORD_APIS.contains(&(k as i16)));
        let r = &mut self.render;
        let (raw, no_payloads) = (r.opts.raw, r.opts.no_payloads);
        out.extend_from_slice(b"{\"type\":\"exchange\"");
        r.start_collect(record_api && raw && no_payloads);
        for name in [
            "ts",
            "response_ts",
            "latency_ms",
            "connection",
            "client",
            "broker",
            "api_key",
            "api_name",
            "api_version",
            "correlation_id",
            "client_id",
            "status",
            "error_codes",
            "request",
            "response",
            "request_size",
            "response_size",
            "response_version",
        ] {
            out.push(b',');
            json_str(out, name);
            out.push(b':');
            let v = item.getattr(name)?;
            if name == "response" && no_payloads && dict_with(&v, "_raw_body")? {
                // output.without_raw_body: the dict with _raw_body by its size
                out.push(b'{');
                for (i, (k, x)) in v.cast::<PyDict>()?.iter().enumerate() {
                    if i > 0 {
                        out.push(b',');
                    }
                    r.py_key(out, &k)?;
                    out.push(b':');
                    if k.extract::<&str>().ok() == Some("_raw_body") {
                        dropped_raw_body(out, x.len()?);
                    } else {
                        r.py_json(py, out, &x, record_api)?;
                    }
                }
                out.push(b'}');
            } else {
                r.py_json(py, out, &v, record_api)?;
            }
        }
        out.extend_from_slice(b",\"flags\":[");
        for (i, f) in item.getattr("flags")?.try_iter()?.enumerate() {
            if i > 0 {
                out.push(b',');
            }
            r.py_json(py, out, &f?, false)?;
        }
        out.push(b']');
        let tls = item.getattr("tls")?;
        if !tls.is_none() {
            out.extend_from_slice(b",\"tls\":");
            r.py_json(py, out, &tls, false)?;
        }
        if raw {
            for (name, body, keep) in [
                ("request_raw", "request", 8),
                ("response_raw", "response", 4),
            ] {
                out.push(b',');
                json_str(out, name);
                out.push(b':');
                let body = item.getattr(body)?;
                // output._opaque
                let opaque = dict_with(&body, "_raw_body")?
                    || record_api && dict_with(&body, "_decode_error")?;
                let v = as_bytes(&item.getattr(name)?)?;
                r.raw_hex(out, v.as_deref(), no_payloads && opaque, keep, &[]);
            }
        }
        r.start_collect(false);
        out.extend_from_slice(b"}\n");
        Ok(())
    }
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<Lines>()?;
    Ok(())
}
