//! The cluster's PersistentVolumeClaims, PersistentVolumes and StorageClasses, kept in memory so pod advice can
//! follow a pod's volumes (a zonal volume's zone, a StorageClass's allowed topologies) as the controller does.

use super::reflect::{reflect_all, AbortOnDrop};
use crate::admission::pods::VolumeSource;
use crate::scheduling::volumes::VolumeIndex;
use ::kube::runtime::reflector::Store;
use ::kube::{Api, Client, Resource};
use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim};
use k8s_openapi::api::storage::v1::StorageClass;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

/// Reflectors over every claim, volume and class. Until all three have listed once the index is unknown, so
/// advice is not told that a claim is missing merely because the list has not arrived.
pub struct VolumeStores {
    claims: Store<PersistentVolumeClaim>,
    volumes: Store<PersistentVolume>,
    classes: Store<StorageClass>,
    synced: Arc<AtomicBool>,
    _tasks: [AbortOnDrop; 3],
}

impl VolumeStores {
    /// Starts the three watches (each on its own task, stopped when this drops).
    pub fn watch(client: Client) -> Self {
        fn all<K>(client: &Client) -> (Store<K>, AbortOnDrop)
        where
            K: Resource<DynamicType = ()>
                + Clone
                + serde::de::DeserializeOwned
                + std::fmt::Debug
                + Send
                + Sync
                + 'static,
        {
            reflect_all(
                Api::<K>::all(client.clone()),
                (),
                K::kind(&()).into_owned(),
                || {},
            )
        }
        let (claims, claims_task) = all::<PersistentVolumeClaim>(&client);
        let (volumes, volumes_task) = all::<PersistentVolume>(&client);
        let (classes, classes_task) = all::<StorageClass>(&client);
        let synced = Arc::new(AtomicBool::new(false));
        let readers = (claims.clone(), volumes.clone(), classes.clone());
        let flag = synced.clone();
        tokio::spawn(async move {
            let (a, b, c) = tokio::join!(
                readers.0.wait_until_ready(),
                readers.1.wait_until_ready(),
                readers.2.wait_until_ready()
            );
            if a.is_ok() && b.is_ok() && c.is_ok() {
                flag.store(true, Ordering::Release);
                tracing::info!("PersistentVolumeClaims, PersistentVolumes and StorageClasses synced for pod advice");
            }
        });
        VolumeStores {
            claims,
            volumes,
            classes,
            synced,
            _tasks: [claims_task, volumes_task, classes_task],
        }
    }
}

impl VolumeSource for VolumeStores {
    fn index(&self) -> Option<VolumeIndex> {
        self.synced.load(Ordering::Acquire).then(|| {
            VolumeIndex::from_objects(
                self.claims.state(),
                self.volumes.state(),
                self.classes.state(),
            )
        })
    }
}
