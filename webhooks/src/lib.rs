//! kerf-webhooks
