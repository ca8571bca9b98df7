//! The session's defences against a client that sends too fast: the
//! per-connection message rate, the backoff window a refusal opens, and
//! the strikes that end in Disconnect(message_flood) (whose retry-after
//! the shard then holds against the account's logons from the address,
//! see [`crate::auth::AuthGuard::hold_after_flood`]).

use super::backoff::{self, Gate};
use super::{Ctx, Session};
use crate::gateway::GatewayStats;
use crate::wire::{DisconnectReason, Message, RejectReason};

impl Session {
    /// Per-connection message rate limit: a refusal's retry-after is one
    /// to two of the bucket's refills (see
    /// [`crate::admission::refill_retry_ms`]); a refusal is a strike (see
    /// [`backoff`]).
    pub(super) fn take_msg_token(&mut self, msg: &Message<'_>, ctx: &mut Ctx<'_>) -> bool {
        if self.msg_bucket.try_take(ctx.now_ns) {
            self.backoff.passed();
            return true;
        }
        if self.strike(ctx) {
            // Counted as `pricewire_sheds_total{reason="conn_rate_limited"}`.
            GatewayStats::add(&ctx.stats.rejects_rate_limited, 1);
            let token = self.msg_bucket.token_ns();
            let retry = crate::admission::refill_retry_ms(token, ctx.rng);
            let rid = msg.request_id().unwrap_or(0);
            let t = msg.template_id();
            self.reject(ctx, rid, t, RejectReason::RATE_LIMITED, retry, "");
        }
        false
    }

    /// The backoff window's verdict on `msg`: true if it goes on. Inside
    /// the window it is refused with the time left, a strike (one sent
    /// after the grace also restarts the window, longer).
    pub(super) fn gate(&mut self, msg: &Message<'_>, ctx: &mut Ctx<'_>) -> bool {
        let grace = backoff::grace_ns(self.rtt_ns);
        let sent_by = ctx.input_since_ns;
        let Gate::Refuse { retry_ms, .. } = self.backoff.check_sent(ctx.now_ns, sent_by, grace)
        else {
            return true;
        };
        if !self.strike(ctx) {
            return false;
        }
        GatewayStats::add(&ctx.stats.rejects_backoff, 1);
        let (rid, t) = (msg.request_id().unwrap_or(0), msg.template_id());
        // Not `reject`: this refusal restates the window, it opens none.
        self.reject_frame(
            ctx,
            rid,
            t,
            RejectReason::RATE_LIMITED,
            retry_ms,
            "retry later",
        );
        false
    }

    /// One more refusal in a row: past `flood_disconnect_after` the
    /// session ends with Disconnect(message_flood) and a jittered floor
    /// (false then).
    fn strike(&mut self, ctx: &mut Ctx<'_>) -> bool {
        if self.backoff.strike() <= ctx.cfg.flood_disconnect_after {
            return true;
        }
        GatewayStats::add(&ctx.stats.disconnects_flood, 1);
        let retry = ctx.jitter(ctx.cfg.error_retry);
        let reason = DisconnectReason::MESSAGE_FLOOD;
        self.disconnect(ctx, reason, retry, "message flood");
        self.effects.flood_retry_ms = Some(retry);
        false
    }

    /// A refusal for this session came from elsewhere (the request path's
    /// account rate): one for the client's own rate opens a backoff window.
    pub fn note_refusal(&mut self, reason: RejectReason, retry_after_ms: u32, now_ns: u64) {
        if reason == RejectReason::RATE_LIMITED {
            self.backoff.told(retry_after_ms, now_ns);
        }
    }
}
