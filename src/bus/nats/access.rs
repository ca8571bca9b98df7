//! What the client presents and trusts at each connect attempt: the
//! credentials and the TLS settings, read again from their files before
//! every attempt so a rotated secret or certificate is used without a
//! restart. A file that cannot be read or no longer parses keeps the last
//! good value, with one warning per new reason.

use std::sync::Arc;

use rustls::ClientConfig;

use super::auth::Material;
use super::tls;
use crate::bus::security::{AccessError, BusAuth, BusTls};

/// See the module doc.
pub(crate) struct Access {
    auth: BusAuth,
    tls: Option<BusTls>,
    material: Material,
    tls_config: Option<Arc<ClientConfig>>,
    /// The last reload failure warned about.
    warned: Option<String>,
}

impl Access {
    /// Reads everything once; an error names the flag or file.
    pub(crate) fn new(auth: &BusAuth, tls: Option<&BusTls>) -> Result<Access, AccessError> {
        Ok(Access {
            material: Material::load(auth)?,
            tls_config: tls.map(tls::client_config).transpose()?,
            auth: auth.clone(),
            tls: tls.cloned(),
            warned: None,
        })
    }

    /// No credentials, no TLS (tests of the protocol).
    #[cfg(test)]
    pub(crate) fn open() -> Access {
        Access::new(&BusAuth::None, None).expect("nothing to read")
    }

    /// Reads the files again (see the module doc).
    pub(crate) fn refresh(&mut self) {
        let material = Material::load(&self.auth);
        let config = self.tls.as_ref().map(tls::client_config).transpose();
        match (material, config) {
            (Ok(m), Ok(c)) => {
                self.material = m;
                self.tls_config = c;
                self.warned = None;
            }
            (Err(e), _) | (_, Err(e)) => {
                let e = e.to_string();
                if self.warned.as_deref() != Some(e.as_str()) {
                    tracing::warn!(reason = %crate::runtime::esc(&e), "bus credentials or TLS files could not be read again; using the last good ones");
                    self.warned = Some(e);
                }
            }
        }
    }

    /// The credentials to send now.
    pub(crate) fn material(&self) -> &Material {
        &self.material
    }

    /// The TLS settings, when TLS is on.
    pub(crate) fn tls_config(&self) -> Option<Arc<ClientConfig>> {
        self.tls_config.clone()
    }

    /// How the client authenticates, for messages.
    pub(crate) fn describe(&self) -> String {
        self.auth.describe()
    }
}
