//! libpq connection strings (`snowflake.registry`), read the way libpq reads them, to check
//! one when it is set and to show it without its password, in every server process. libpq
//! itself is loaded only by the lease keeper (`src/lease/libpq.rs` of the extension), so that no other process of
//! the server holds a libpq of another version than the one its own replication uses.
//!
//! Two forms: `keyword = value` pairs, values in single quotes when they hold spaces (with `\'`
//! and `\\` inside), and URIs (`postgresql://...` or `postgres://...`, their parameters after
//! `?`). A keyword libpq does not know is an error, as libpq makes it.

/// The keywords libpq knows (PostgreSQL 14 to 18).
const KEYWORDS: &[&str] = &[
    "application_name",
    "authtype",
    "channel_binding",
    "client_encoding",
    "connect_timeout",
    "dbname",
    "fallback_application_name",
    "gssdelegation",
    "gssencmode",
    "gsslib",
    "host",
    "hostaddr",
    "keepalives",
    "keepalives_count",
    "keepalives_idle",
    "keepalives_interval",
    "krbsrvname",
    "load_balance_hosts",
    "max_protocol_version",
    "min_protocol_version",
    "oauth_client_id",
    "oauth_client_secret",
    "oauth_issuer",
    "oauth_scope",
    "options",
    "passfile",
    "password",
    "port",
    "replication",
    "require_auth",
    "requirepeer",
    "requiressl",
    "scram_client_key",
    "scram_server_key",
    "service",
    "ssl_max_protocol_version",
    "ssl_min_protocol_version",
    "sslcert",
    "sslcertmode",
    "sslcompression",
    "sslcrl",
    "sslcrldir",
    "sslkey",
    "sslmode",
    "sslnegotiation",
    "sslpassword",
    "sslrootcert",
    "sslsni",
    "target_session_attrs",
    "tcp_user_timeout",
    "tty",
    "user",
];

/// The keyword-value pairs of `text`, in order, or why it is not a connection string (as
/// libpq would say; a password is never repeated).
pub fn parse(text: &str) -> Result<Vec<(String, String)>, String> {
    let trimmed = text.trim();
    let pairs = match ["postgresql://", "postgres://"]
        .iter()
        .find_map(|p| trimmed.strip_prefix(p))
    {
        Some(rest) => uri(rest)?,
        None => pairs(trimmed)?,
    };
    for (key, _) in &pairs {
        if !KEYWORDS.contains(&key.as_str()) {
            return Err(format!("invalid connection option \"{key}\""));
        }
    }
    Ok(pairs)
}

/// The keywords whose value is a secret: a password, or what stands for one (the passphrase
/// of a client key, an OAuth client's secret, SCRAM keys derived from a password). None may be
/// written into a setting, which PostgreSQL logs at each reload that changes it.
pub const SECRETS: &[&str] = &[
    "password",
    "sslpassword",
    "oauth_client_secret",
    "scram_client_key",
    "scram_server_key",
];

/// Whether `key`'s value is a secret.
pub fn is_secret(key: &str) -> bool {
    SECRETS.contains(&key)
}

/// The secret keywords `text` holds, in order, each once (none if it does not parse).
pub fn secrets(text: &str) -> Vec<String> {
    let mut found: Vec<String> = Vec::new();
    for (key, _) in parse(text).unwrap_or_default() {
        if is_secret(&key) && !found.contains(&key) {
            found.push(key);
        }
    }
    found
}

/// `keyword = value ...`.
fn pairs(text: &str) -> Result<Vec<(String, String)>, String> {
    let mut out = Vec::new();
    let mut chars = text.chars().peekable();
    loop {
        while chars.next_if(|c| c.is_whitespace()).is_some() {}
        if chars.peek().is_none() {
            return Ok(out);
        }
        let mut key = String::new();
        while let Some(c) = chars.next_if(|c| *c != '=' && !c.is_whitespace()) {
            key.push(c);
        }
        while chars.next_if(|c| c.is_whitespace()).is_some() {}
        if chars.next() != Some('=') {
            return Err(format!(
                "missing \"=\" after \"{key}\" in connection info string"
            ));
        }
        while chars.next_if(|c| c.is_whitespace()).is_some() {}
        let mut value = String::new();
        if chars.next_if_eq(&'\'').is_some() {
            loop {
                match chars.next() {
                    None => {
                        return Err("unterminated quoted string in connection info string".into())
                    }
                    Some('\'') => break,
                    Some('\\') => value.extend(chars.next()),
                    Some(c) => value.push(c),
                }
            }
        } else {
            while let Some(c) = chars.next_if(|c| !c.is_whitespace()) {
                if c == '\\' {
                    value.extend(chars.next());
                } else {
                    value.push(c);
                }
            }
        }
        out.push((key, value));
    }
}

/// The part of a URI after `postgresql://`: its parameters after `?` (what precedes them,
/// user, password, hosts, ports and database, names no keyword that could be wrong).
fn uri(rest: &str) -> Result<Vec<(String, String)>, String> {
    let mut out = Vec::new();
    let (before, query) = rest.split_once('?').unwrap_or((rest, ""));
    if let Some((userinfo, _)) = before.split_once('@') {
        if let Some((_, password)) = userinfo.split_once(':') {
            out.push(("password".to_string(), password.to_string()));
        }
    }
    for param in query.split('&').filter(|p| !p.is_empty()) {
        match param.split_once('=') {
            Some((key, value)) => out.push((key.to_string(), value.to_string())),
            None => {
                return Err(format!(
                    "missing key/value separator \"=\" in URI query parameter: \"{param}\""
                ))
            }
        }
    }
    Ok(out)
}

/// The connection string as it may be shown: with every secret (`SECRETS`) replaced by
/// `********`.
pub fn without_secrets(text: &str) -> String {
    let trimmed = text.trim();
    if let Some(scheme) = ["postgresql://", "postgres://"]
        .into_iter()
        .find(|p| trimmed.starts_with(p))
    {
        if parse(trimmed).is_err() {
            return "(not a connection string)".to_string();
        }
        let rest = &trimmed[scheme.len()..];
        let (authority, tail) = match rest.find(['/', '?']) {
            Some(at) => rest.split_at(at),
            None => (rest, ""),
        };
        let authority = match authority.rsplit_once('@') {
            Some((userinfo, hosts)) => match userinfo.split_once(':') {
                Some((user, _)) => format!("{user}:********@{hosts}"),
                None => format!("{userinfo}@{hosts}"),
            },
            None => authority.to_string(),
        };
        let tail = tail
            .split('&')
            .map(|p| {
                let (lead, param) = match p.split_once('?') {
                    Some((path, param)) => (format!("{path}?"), param),
                    None => (String::new(), p),
                };
                match param.split_once('=') {
                    Some((key, _)) if is_secret(key) => format!("{lead}{key}=********"),
                    _ => p.to_string(),
                }
            })
            .collect::<Vec<_>>()
            .join("&");
        return format!("{scheme}{authority}{tail}");
    }
    match parse(text) {
        Ok(pairs) if pairs.iter().any(|(k, _)| is_secret(k)) => pairs
            .iter()
            .map(|(k, v)| {
                if is_secret(k) {
                    format!("{k}=********")
                } else if v.is_empty() || v.contains(char::is_whitespace) || v.contains('\'') {
                    format!("{k}='{}'", v.replace('\\', "\\\\").replace('\'', "\\'"))
                } else {
                    format!("{k}={v}")
                }
            })
            .collect::<Vec<_>>()
            .join(" "),
        Ok(_) => text.to_string(),
        Err(_) => "(not a connection string)".to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keyword_values_and_uris_parse_as_libpq_reads_them() {
        let p = parse(
            "host=reg1,reg2 port = 5432 dbname=registry user='the fleet' options='-c a=\\'b\\''",
        )
        .unwrap();
        assert_eq!(p[0], ("host".into(), "reg1,reg2".into()));
        assert_eq!(p[1], ("port".into(), "5432".into()));
        assert_eq!(p[3], ("user".into(), "the fleet".into()));
        assert_eq!(p[4], ("options".into(), "-c a='b'".into()));
        assert_eq!(parse("  ").unwrap(), vec![]);
        let u =
            parse("postgresql://fleet:secret@reg1,reg2/registry?target_session_attrs=read-write")
                .unwrap();
        assert!(u.contains(&("target_session_attrs".into(), "read-write".into())));
        assert!(u.contains(&("password".into(), "secret".into())));
    }

    #[test]
    fn what_libpq_refuses_is_refused() {
        assert_eq!(
            parse("host=x nonsense=1"),
            Err("invalid connection option \"nonsense\"".into())
        );
        assert!(parse("host")
            .unwrap_err()
            .contains("missing \"=\" after \"host\""));
        assert!(parse("host='x").unwrap_err().contains("unterminated"));
        assert!(parse("postgresql://x/db?bogus=1")
            .unwrap_err()
            .contains("bogus"));
        assert!(parse("postgresql://x/db?sslmode")
            .unwrap_err()
            .contains("separator"));
    }

    #[test]
    fn no_secret_is_ever_shown() {
        assert_eq!(
            without_secrets("host=reg sslpassword=k3y oauth_client_secret=x scram_client_key=y"),
            "host=reg sslpassword=******** oauth_client_secret=******** scram_client_key=********"
        );
        assert_eq!(
            without_secrets("postgresql://reg/r?sslmode=require&sslpassword=k3y"),
            "postgresql://reg/r?sslmode=require&sslpassword=********"
        );
        assert_eq!(
            secrets("host=reg password=a sslpassword=b password=c"),
            ["password", "sslpassword"]
        );
        assert!(secrets("postgresql://u:p@reg/r").contains(&"password".to_string()));
        assert!(secrets("host=reg dbname=r passfile=/x").is_empty());
    }

    #[test]
    fn a_password_is_never_shown() {
        let shown = without_secrets("host=reg user=fleet password='s3 cret' dbname=r");
        assert_eq!(shown, "host=reg user=fleet password=******** dbname=r");
        assert_eq!(
            without_secrets("postgresql://fleet:s3cret@reg/r?sslmode=require"),
            "postgresql://fleet:********@reg/r?sslmode=require"
        );
        assert_eq!(
            without_secrets("postgresql://reg/r?password=s3cret&sslmode=require"),
            "postgresql://reg/r?password=********&sslmode=require"
        );
        assert_eq!(without_secrets("host=reg dbname=r"), "host=reg dbname=r");
        assert_eq!(
            without_secrets("host=x bogus=password"),
            "(not a connection string)"
        );
    }
}
