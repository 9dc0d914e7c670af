//! The pairing calls (see evi-server's `routes/pairing.rs`). The creator
//! calls with its device token; the joiner without one (reading the offer,
//! joining), then with the secret its join answered.

use std::time::Duration;

use evi_shared::api::{
    AuthResponse, PairDeviceRequest, PairJoinRequest, PairJoinResponse, PairOfferResponse,
    PairOpenRequest, PairOpenResponse, PairReplyRequest, PairState, PairWaitResponse,
};

use super::{Client, ClientError};

impl Client {
    /// The same client calling with `token` (the joiner's slot secret).
    pub fn with_token(&self, token: String) -> Self {
        Self {
            token: Some(token),
            ..self.clone()
        }
    }

    pub fn pair_open(&self, offer: &[u8]) -> Result<PairOpenResponse, ClientError> {
        self.post(
            "/pair",
            &PairOpenRequest {
                offer: offer.to_vec().into(),
            },
        )
    }

    pub fn pair_offer(&self, slot: u32) -> Result<PairOfferResponse, ClientError> {
        self.get(&format!("/pair/{slot}"))
    }

    pub fn pair_join(&self, slot: u32, hello: &[u8]) -> Result<PairJoinResponse, ClientError> {
        self.post(
            &format!("/pair/{slot}/join"),
            &PairJoinRequest {
                hello: hello.to_vec().into(),
            },
        )
    }

    /// Parks until the slot leaves `state` or `secs` pass (the server caps
    /// them); the request's own timeout allows for the wait.
    pub fn pair_wait(
        &self,
        slot: u32,
        state: PairState,
        secs: u32,
    ) -> Result<PairWaitResponse, ClientError> {
        let state = serde_json::to_value(state)
            .ok()
            .and_then(|v| v.as_str().map(str::to_owned))
            .unwrap_or_default();
        let url = self.url(&format!("/pair/{slot}/wait?state={state}&timeout={secs}"));
        let limit = Duration::from_secs(u64::from(secs) + 20);
        self.call(
            || self.http.get(&url).timeout(limit),
            |resp| self.json(resp),
        )
    }

    /// Adds the joiner as `device`, in place of `replaces` (its own device
    /// from before a key rotation) if it names one.
    pub fn pair_device(
        &self,
        slot: u32,
        device: &str,
        replaces: Option<&str>,
    ) -> Result<AuthResponse, ClientError> {
        self.post_proven(
            &format!("/pair/{slot}/device"),
            &PairDeviceRequest {
                device: device.to_owned(),
                replaces: replaces.map(str::to_owned),
            },
        )
    }

    pub fn pair_reply(&self, slot: u32, reply: &[u8]) -> Result<(), ClientError> {
        let url = self.url(&format!("/pair/{slot}/reply"));
        let body = PairReplyRequest {
            reply: reply.to_vec().into(),
        };
        self.send(|| self.http.post(&url).json(&body)).map(drop)
    }

    /// Ends the slot (`done` for the joiner holding the reply, else
    /// `closed`).
    pub fn pair_close(&self, slot: u32) -> Result<(), ClientError> {
        let url = self.url(&format!("/pair/{slot}"));
        self.send(|| self.http.delete(&url)).map(drop)
    }
}
