//! A real, authoritative DNS server on loopback whose zone tests change while it runs.
//!
//! It answers UDP and TCP on one random port of 127.0.0.1 from a shared table of records:
//! NOERROR with the records of the asked type (following a CNAME), NOERROR with no answers when the
//! name exists with other types (or has names below it), NXDOMAIN otherwise; negative answers carry
//! an SOA whose minimum is one second, so resolvers cache them only briefly. Names under a
//! *silenced* suffix are never answered, which makes a resolver time out.

use std::collections::{HashMap, HashSet};
use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Mutex};

use hickory_server::proto::op::{Message, MessageType, ResponseCode};
use hickory_server::proto::rr::rdata::{A, AAAA, CNAME, MX, NS, SOA, TXT};
use hickory_server::proto::rr::{Name, RData, Record, RecordType};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, UdpSocket};

#[derive(Default)]
struct Zone {
    records: HashMap<String, Vec<RData>>,
    silenced: HashSet<String>,
}

fn key(name: &str) -> String {
    name.trim_end_matches('.').to_ascii_lowercase()
}

fn name(s: &str) -> Name {
    Name::from_ascii(format!("{}.", key(s))).expect("a valid DNS name")
}

/// The loopback DNS server; dropping it does not stop it (it lives as long as the test runtime).
#[derive(Clone)]
pub struct DnsServer {
    addr: SocketAddr,
    zone: Arc<Mutex<Zone>>,
}

impl DnsServer {
    /// Starts an empty server.
    pub async fn start() -> DnsServer {
        // Bind TCP first on a random port, then UDP on the same one (retry if it is taken).
        let (tcp, udp) = loop {
            let tcp = TcpListener::bind("127.0.0.1:0").await.unwrap();
            let port = tcp.local_addr().unwrap().port();
            if let Ok(udp) = UdpSocket::bind(("127.0.0.1", port)).await {
                break (tcp, udp);
            }
        };
        let server = DnsServer {
            addr: tcp.local_addr().unwrap(),
            zone: Arc::new(Mutex::new(Zone::default())),
        };
        let zone = server.zone.clone();
        let udp = Arc::new(udp);
        tokio::spawn(async move {
            let mut buf = vec![0u8; 4096];
            while let Ok((n, peer)) = udp.recv_from(&mut buf).await {
                let Some((reply, limit)) = answer(&zone, &buf[..n]) else {
                    continue;
                };
                // Too large for the client's UDP buffer: set TC so that it asks again over TCP.
                let bytes = match reply.to_vec() {
                    Ok(b) if b.len() <= limit => b,
                    _ => match reply.truncate().to_vec() {
                        Ok(b) => b,
                        Err(_) => continue,
                    },
                };
                let _ = udp.send_to(&bytes, peer).await;
            }
        });
        let zone = server.zone.clone();
        tokio::spawn(async move {
            while let Ok((mut socket, _)) = tcp.accept().await {
                let zone = zone.clone();
                tokio::spawn(async move {
                    loop {
                        let mut len = [0u8; 2];
                        if socket.read_exact(&mut len).await.is_err() {
                            return;
                        }
                        let mut query = vec![0u8; u16::from_be_bytes(len) as usize];
                        if socket.read_exact(&mut query).await.is_err() {
                            return;
                        }
                        let Some(reply) = answer(&zone, &query).and_then(|(m, _)| m.to_vec().ok())
                        else {
                            continue;
                        };
                        let mut framed = (reply.len() as u16).to_be_bytes().to_vec();
                        framed.extend_from_slice(&reply);
                        if socket.write_all(&framed).await.is_err() {
                            return;
                        }
                    }
                });
            }
        });
        server
    }

    /// `ip:port` for Herald's `dns_nameservers` setting.
    pub fn nameserver(&self) -> String {
        self.addr.to_string()
    }

    /// Adds one record.
    pub fn add(&self, owner: &str, rdata: RData) {
        let mut zone = self.zone.lock().unwrap();
        zone.records.entry(key(owner)).or_default().push(rdata);
    }

    /// Adds a TXT record of one string (split into 255-byte chunks as DNS requires).
    pub fn txt(&self, owner: &str, value: &str) {
        let chunks = value
            .as_bytes()
            .chunks(255)
            .map(|c| String::from_utf8_lossy(c).into_owned())
            .collect();
        self.add(owner, RData::TXT(TXT::new(chunks)));
    }

    /// Adds an MX record.
    pub fn mx(&self, owner: &str, preference: u16, exchange: &str) {
        self.add(owner, RData::MX(MX::new(preference, name(exchange))));
    }

    /// Adds an A or AAAA record.
    pub fn ip(&self, owner: &str, ip: IpAddr) {
        match ip {
            IpAddr::V4(v4) => self.add(owner, RData::A(A(v4))),
            IpAddr::V6(v6) => self.add(owner, RData::AAAA(AAAA(v6))),
        }
    }

    /// Adds a CNAME record.
    pub fn cname(&self, owner: &str, target: &str) {
        self.add(owner, RData::CNAME(CNAME(name(target))));
    }

    /// Adds an NS and an SOA record, which makes `owner` exist as a zone apex.
    pub fn apex(&self, owner: &str) {
        self.add(owner, RData::NS(NS(name(&format!("ns1.{}", key(owner))))));
        self.add(owner, soa(owner));
    }

    /// Removes every record of `kind` at `owner`.
    pub fn remove(&self, owner: &str, kind: RecordType) {
        let mut zone = self.zone.lock().unwrap();
        if let Some(list) = zone.records.get_mut(&key(owner)) {
            list.retain(|r| r.record_type() != kind);
        }
    }

    /// Never answers queries for `suffix` or names below it.
    pub fn silence(&self, suffix: &str) {
        self.zone.lock().unwrap().silenced.insert(key(suffix));
    }
}

fn soa(owner: &str) -> RData {
    let apex = key(owner);
    RData::SOA(SOA::new(
        name(&format!("ns1.{apex}")),
        name(&format!("admin.{apex}")),
        1,
        3600,
        600,
        86400,
        1,
    ))
}

fn under(name: &str, suffix: &str) -> bool {
    name == suffix || name.ends_with(&format!(".{suffix}"))
}

/// The response to a query and the largest UDP payload the client accepts.
fn answer(zone: &Mutex<Zone>, query: &[u8]) -> Option<(Message, usize)> {
    let request = Message::from_vec(query).ok()?;
    let question = request.queries.first()?.clone();
    let asked = key(&question.name().to_ascii());
    let kind = question.query_type();
    let zone = zone.lock().unwrap();
    if zone.silenced.iter().any(|s| under(&asked, s)) {
        return None;
    }
    let mut response = Message::response(request.metadata.id, request.metadata.op_code);
    response.metadata.message_type = MessageType::Response;
    response.metadata.authoritative = true;
    response.metadata.recursion_desired = request.metadata.recursion_desired;
    response.metadata.recursion_available = true;
    response.add_query(question.clone());
    let limit = request
        .edns
        .as_ref()
        .map_or(512, |e| usize::from(e.max_payload()).max(512));
    if let Some(edns) = &request.edns {
        let mut reply_edns = edns.clone();
        reply_edns.set_max_payload(4096);
        response.set_edns(reply_edns);
    }

    let mut current = asked.clone();
    let mut found_any = false;
    for _ in 0..8 {
        let Some(records) = zone.records.get(&current) else {
            break;
        };
        found_any = true;
        let matching: Vec<&RData> = records.iter().filter(|r| r.record_type() == kind).collect();
        if !matching.is_empty() {
            for r in matching {
                response.add_answer(Record::from_rdata(name(&current), 1, r.clone()));
            }
            break;
        }
        let Some(RData::CNAME(target)) = records.iter().find(|r| matches!(r, RData::CNAME(_)))
        else {
            break;
        };
        response.add_answer(Record::from_rdata(
            name(&current),
            1,
            RData::CNAME(target.clone()),
        ));
        current = key(&target.0.to_ascii());
    }
    let exists = found_any
        || zone
            .records
            .keys()
            .any(|k| k.ends_with(&format!(".{asked}")));
    if response.answers.is_empty() {
        if !exists {
            response.metadata.response_code = ResponseCode::NXDomain;
        }
        // The closest enclosing name with an SOA, or the asked name's parent as a stand-in apex.
        let apex = std::iter::successors(Some(asked.as_str()), |n| n.split_once('.').map(|x| x.1))
            .find(|n| {
                zone.records
                    .get(*n)
                    .is_some_and(|rs| rs.iter().any(|r| matches!(r, RData::SOA(_))))
            })
            .map(str::to_string)
            .unwrap_or_else(|| {
                asked
                    .split_once('.')
                    .map(|x| x.1.to_string())
                    .unwrap_or(asked.clone())
            });
        response.add_authority(Record::from_rdata(name(&apex), 1, soa(&apex)));
    }
    Some((response, limit))
}
