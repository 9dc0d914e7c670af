//! [`Store`] for [`SqliteStore`]: each method is in the file of its role.

use super::*;
use crate::store::rotation::{Begun, Committed};

#[async_trait]
impl Store for SqliteStore {
    async fn pair_open(&self, slot: NewPairSlot) -> StoreResult<u32> {
        pairing::open(self, slot).await
    }
    async fn pair_slot(&self, number: u32, now: i64) -> StoreResult<Option<PairSlot>> {
        pairing::get(self, number, now).await
    }
    async fn pair_step(
        &self,
        number: u32,
        from: evi_shared::api::PairState,
        step: PairStep,
        now: i64,
    ) -> StoreResult<bool> {
        pairing::step(self, number, from, step, now).await
    }
    async fn pair_mint(
        &self,
        number: u32,
        user: UserId,
        device: NewDevice,
        now: i64,
    ) -> StoreResult<Option<String>> {
        pairing::mint(self, number, user, device, now).await
    }
    async fn create_user(
        &self,
        name: &str,
        password_hash: String,
        invite_hash: Option<[u8; 32]>,
        device: NewDevice,
    ) -> StoreResult<UserId> {
        accounts::create_user(self, name, password_hash, invite_hash, device).await
    }
    async fn credentials(&self, name: &str) -> StoreResult<Option<Credentials>> {
        accounts::credentials(self, name).await
    }
    async fn add_device(&self, user: UserId, device: NewDevice) -> StoreResult<String> {
        accounts::add_device(self, user, device).await
    }
    async fn token_owner(&self, token_hash: [u8; 32]) -> StoreResult<Option<TokenOwner>> {
        accounts::token_owner(self, token_hash).await
    }
    async fn touch_device(&self, device_id: &str, now: i64) -> StoreResult<()> {
        accounts::touch_device(self, device_id, now).await
    }
    async fn devices(
        &self,
        user: UserId,
        after: Option<String>,
        limit: u32,
    ) -> StoreResult<Vec<DeviceRow>> {
        accounts::devices(self, user, after, limit).await
    }
    async fn revoke_device(&self, user: UserId, device_id: &str) -> StoreResult<bool> {
        accounts::revoke_device(self, user, device_id).await
    }
    async fn change_password(&self, user: UserId, hash: String, keep: &str) -> StoreResult<u64> {
        accounts::change_password(self, user, hash, keep).await
    }
    async fn key_check(&self, user: UserId) -> StoreResult<Option<Vec<u8>>> {
        accounts::key_check(self, user).await
    }
    async fn set_key_check(&self, user: UserId, value: Vec<u8>) -> StoreResult<()> {
        accounts::set_key_check(self, user, value).await
    }
    async fn accounts(&self) -> StoreResult<Vec<crate::store::admin::AccountRow>> {
        admin::accounts(self).await
    }
    async fn set_disabled(&self, user: UserId, at: Option<i64>) -> StoreResult<bool> {
        admin::set_disabled(self, user, at).await
    }
    async fn retire_account(&self, user: UserId, now: i64) -> StoreResult<bool> {
        admin::retire_account(self, user, now).await
    }
    async fn set_quota(&self, user: UserId, quota: Option<i64>) -> StoreResult<bool> {
        admin::set_quota(self, user, quota).await
    }
    async fn invites(&self) -> StoreResult<Vec<crate::store::admin::InviteRow>> {
        admin::invites(self).await
    }
    async fn expire_invite(&self, code_hash: Vec<u8>, at: i64) -> StoreResult<bool> {
        admin::expire_invite(self, code_hash, at).await
    }
    async fn revoke_invite(&self, code_hash: Vec<u8>) -> StoreResult<bool> {
        admin::revoke_invite(self, code_hash).await
    }
    async fn registration(&self) -> StoreResult<Option<evi_shared::api::Registration>> {
        admin::registration(self).await
    }
    async fn set_registration(&self, mode: evi_shared::api::Registration) -> StoreResult<()> {
        admin::set_registration(self, mode).await
    }
    async fn key_proof_hash(&self, user: UserId) -> StoreResult<Option<Vec<u8>>> {
        accounts::key_proof_hash(self, user).await
    }
    async fn set_key_proof_hash(
        &self,
        user: UserId,
        hash: Vec<u8>,
        replace: bool,
    ) -> StoreResult<()> {
        accounts::set_key_proof_hash(self, user, hash, replace).await
    }
    async fn push(
        &self,
        user: UserId,
        records: Vec<NewRecord>,
        quota: Option<u64>,
        per_item: bool,
    ) -> StoreResult<PushOutcome> {
        records::push(self, user, records, quota, per_item).await
    }
    async fn pull(
        &self,
        user: UserId,
        after: u64,
        stream: Option<KeyedId>,
        limit: u32,
        max_bytes: u64,
        cost: PageCost,
    ) -> StoreResult<Page> {
        records::pull(self, user, after, stream, limit, max_bytes, cost).await
    }
    async fn referenced_packs(&self) -> StoreResult<HashSet<(UserId, PackName)>> {
        records::referenced_packs(self).await
    }
    async fn pack_referenced(&self, user: UserId, pack: &PackName) -> StoreResult<bool> {
        records::pack_referenced(self, user, pack).await
    }
    async fn usage(&self, user: UserId) -> StoreResult<Usage> {
        records::usage(self, user).await
    }
    async fn pending_for_device(&self, user: UserId, device: &str, after: u64) -> StoreResult<u64> {
        records::pending_for_device(self, user, device, after).await
    }
    async fn mark_damaged(&self, user: UserId, seqs: Vec<u64>) -> StoreResult<u64> {
        records::mark_damaged(self, user, seqs).await
    }
    async fn known_entries(&self, user: UserId, ids: Vec<KeyedId>) -> StoreResult<Vec<KeyedId>> {
        records::known_entries(self, user, ids).await
    }
    async fn missing_blobs(&self, user: UserId, names: Vec<KeyedId>) -> StoreResult<Vec<KeyedId>> {
        blobs::missing_blobs(self, user, names).await
    }
    async fn blob_size(&self, user: UserId, name: &KeyedId) -> StoreResult<Option<u64>> {
        blobs::blob_size(self, user, name).await
    }
    async fn add_blob(
        &self,
        user: UserId,
        name: &KeyedId,
        size: u64,
        quota: Option<u64>,
        since_ms: i64,
        part_of: Option<&KeyedId>,
    ) -> StoreResult<bool> {
        blobs::add_blob(self, user, name, size, quota, since_ms, part_of).await
    }
    async fn purge_blobs(&self, user: UserId, names: Vec<KeyedId>) -> StoreResult<Vec<KeyedId>> {
        blobs::purge_blobs(self, user, names).await
    }
    async fn create_invite(
        &self,
        code_hash: [u8; 32],
        now: i64,
        expires_at: Option<i64>,
    ) -> StoreResult<()> {
        accounts::create_invite(self, code_hash, now, expires_at).await
    }
    async fn invite_usable(&self, code_hash: [u8; 32], now: i64) -> StoreResult<bool> {
        accounts::invite_usable(self, code_hash, now).await
    }
    async fn packs_to_compact(&self) -> StoreResult<Vec<ToCompact>> {
        self.read(forget::packs_to_compact).await
    }
    async fn blobs_to_collect(&self) -> StoreResult<Vec<(UserId, KeyedId)>> {
        let now = chrono::Utc::now().timestamp_millis();
        self.write(move |c| blob_refs::to_collect(c, now)).await
    }
    async fn collect_blob_row(
        &self,
        user: UserId,
        name: &KeyedId,
    ) -> StoreResult<Option<Vec<KeyedId>>> {
        let name = name.clone();
        self.write(move |c| blob_refs::take_row(c, user, &name))
            .await
    }
    async fn blob_collected(&self, user: UserId, name: &KeyedId) -> StoreResult<()> {
        let (name, now) = (name.clone(), chrono::Utc::now().timestamp_millis());
        self.write(move |c| blob_refs::mark_done(c, user, &name, now))
            .await
    }
    async fn bodies_in_pack(
        &self,
        user: UserId,
        pack: &PackName,
    ) -> StoreResult<Vec<(u64, BodyRef)>> {
        let pack = pack.clone();
        self.read(move |c| forget::bodies_in_pack(c, user, &pack))
            .await
    }
    async fn repoint_bodies(
        &self,
        user: UserId,
        from: &PackName,
        moved: Vec<(u64, BodyRef)>,
    ) -> StoreResult<()> {
        let from = from.clone();
        self.write(move |c| forget::repoint(c, user, &from, &moved))
            .await
    }
    async fn rotation_begin(
        &self,
        user: UserId,
        device: NewDevice,
        by: &str,
        key: crate::store::rotation::NewKey,
    ) -> StoreResult<Begun> {
        rotation::begin(self, user, device, by.to_owned(), key).await
    }
    async fn rotation_commit(
        &self,
        user: UserId,
        device_id: &str,
        through_seq: u64,
        revoke: Vec<String>,
        now: i64,
    ) -> StoreResult<Committed> {
        rotation::commit(self, user, device_id.to_owned(), through_seq, revoke, now).await
    }
    async fn expire_rotations(&self, begun_before: i64, now: i64) -> StoreResult<usize> {
        rotation::expire(self, begun_before, now).await
    }
    async fn retired_users(&self) -> StoreResult<Vec<UserId>> {
        rotation::retired_users(self).await
    }
    async fn retired_blobs(&self, user: UserId) -> StoreResult<Vec<KeyedId>> {
        rotation::retired_blobs(self, user).await
    }
    async fn drop_retired(&self, user: UserId) -> StoreResult<()> {
        rotation::drop_retired(self, user).await
    }
    async fn compaction_done(&self, user: UserId, pack: &PackName) -> StoreResult<()> {
        let pack = pack.clone();
        self.write(move |c| forget::done(c, user, &pack)).await
    }
    async fn totals(&self) -> StoreResult<Totals> {
        accounts::totals(self).await
    }
}
