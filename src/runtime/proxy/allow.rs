//! The networks a PROXY header is trusted from (`--proxy-from`): a header
//! names the address every per-address limit is keyed on, so only the
//! balancers may send one.

use std::fmt;
use std::net::IpAddr;
use std::str::FromStr;

/// One network: an address and a prefix length (`10.0.0.0/8`,
/// `fd00::/8`; a bare address is one host). Host bits past the prefix are
/// ignored.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Cidr {
    net: IpAddr,
    prefix: u8,
}

impl Cidr {
    /// Whether `ip` is in the network. An IPv4-mapped IPv6 address
    /// (`::ffff:a.b.c.d`, what a dual-stack listener reports for an IPv4
    /// peer) counts as its IPv4 address.
    pub fn contains(&self, ip: IpAddr) -> bool {
        match (self.net, ip.to_canonical()) {
            (IpAddr::V4(n), IpAddr::V4(a)) => {
                let mask = u32::MAX
                    .checked_shl(32 - u32::from(self.prefix))
                    .unwrap_or(0);
                u32::from(n) & mask == u32::from(a) & mask
            }
            (IpAddr::V6(n), IpAddr::V6(a)) => {
                let mask = u128::MAX
                    .checked_shl(128 - u32::from(self.prefix))
                    .unwrap_or(0);
                u128::from(n) & mask == u128::from(a) & mask
            }
            _ => false,
        }
    }
}

/// Why a `--proxy-from` network was refused; keeps the text as given.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CidrError {
    /// The address part is not an IP address.
    #[error("`{0}`: not an IP address or network (ADDR[/PREFIX])")]
    NotAnAddress(String),
    /// The prefix length is not a number up to the address's bits.
    #[error("`{value}`: prefix length must be 0..={max}")]
    Prefix {
        /// The network as given.
        value: String,
        /// 32 for IPv4, 128 for IPv6.
        max: u8,
    },
}

impl FromStr for Cidr {
    type Err = CidrError;

    fn from_str(s: &str) -> Result<Cidr, CidrError> {
        let s = s.trim();
        let (addr, prefix) = match s.split_once('/') {
            Some((a, p)) => (a, Some(p)),
            None => (s, None),
        };
        let net: IpAddr = addr
            .parse()
            .map_err(|_| CidrError::NotAnAddress(s.to_string()))?;
        let max = if net.is_ipv4() { 32 } else { 128 };
        let prefix = match prefix {
            None => max,
            Some(p) => {
                p.parse::<u8>()
                    .ok()
                    .filter(|&p| p <= max)
                    .ok_or_else(|| CidrError::Prefix {
                        value: s.to_string(),
                        max,
                    })?
            }
        };
        Ok(Cidr {
            net: net.to_canonical(),
            prefix,
        })
    }
}

impl fmt::Display for Cidr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.net, self.prefix)
    }
}

/// The trusted balancer networks; empty trusts nobody.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AllowList {
    nets: Vec<Cidr>,
}

impl AllowList {
    /// The list of `nets`.
    pub fn new(nets: Vec<Cidr>) -> AllowList {
        AllowList { nets }
    }

    /// Whether a connection from `ip` may send a header.
    pub fn allows(&self, ip: IpAddr) -> bool {
        self.nets.iter().any(|n| n.contains(ip))
    }

    /// Whether the list is empty (trusts nobody).
    pub fn is_empty(&self) -> bool {
        self.nets.is_empty()
    }

    /// The networks, for the start-up log.
    pub fn nets(&self) -> &[Cidr] {
        &self.nets
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn networks_hold_their_addresses_only() {
        let n: Cidr = "10.1.0.0/16".parse().unwrap();
        assert!(n.contains(ip("10.1.255.3")));
        assert!(!n.contains(ip("10.2.0.1")));
        assert!(n.contains(ip("::ffff:10.1.0.9")), "mapped IPv4 counts");
        assert!(!n.contains(ip("fd00::1")));
        let host: Cidr = "127.0.0.1".parse().unwrap();
        assert!(host.contains(ip("127.0.0.1")));
        assert!(!host.contains(ip("127.0.0.2")));
        let all: Cidr = "0.0.0.0/0".parse().unwrap();
        assert!(all.contains(ip("192.0.2.1")));
        let v6: Cidr = "fd00::/8".parse().unwrap();
        assert!(v6.contains(ip("fd12::1")));
        assert!(!v6.contains(ip("fe80::1")));
        assert_eq!(
            "10.1.2.3/8".parse::<Cidr>().unwrap().to_string(),
            "10.1.2.3/8"
        );
        assert!("10.1.2.3/8"
            .parse::<Cidr>()
            .unwrap()
            .contains(ip("10.9.9.9")));
    }

    #[test]
    fn malformed_networks_are_refused_naming_the_text() {
        for bad in [
            "",
            "10.0.0.0/33",
            "fd00::/129",
            "10.0.0/8",
            "host/8",
            "10.0.0.0/x",
        ] {
            let e = bad.parse::<Cidr>().unwrap_err().to_string();
            assert!(e.contains(bad.trim()), "{e}");
        }
    }

    #[test]
    fn an_empty_list_trusts_nobody() {
        assert!(!AllowList::default().allows(ip("127.0.0.1")));
        let l = AllowList::new(vec![
            "127.0.0.1".parse().unwrap(),
            "fd00::/8".parse().unwrap(),
        ]);
        assert!(l.allows(ip("127.0.0.1")) && l.allows(ip("fd00::5")));
        assert!(!l.allows(ip("127.0.0.2")));
    }
}
