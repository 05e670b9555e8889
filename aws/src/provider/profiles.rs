//! Instance profiles: the one kerf manages for an EC2NodeClass's `role`, and one the class names.

use super::*;

impl AwsCloud {
    /// The instance profile kerf manages for class `node_class`, created when missing and made to hold exactly
    /// `role`. A role that does not exist makes the class not ready.
    pub(super) async fn managed_profile(
        &self,
        node_class: &str,
        role: &str,
    ) -> Result<String, CloudError> {
        let cluster = &self.settings.cluster.name;
        let name = profile_name(cluster, &self.region, node_class);
        let role = role_name(role);
        if lock(&self.profiles).get(&name).is_some_and(|r| r == role) {
            return Ok(name);
        }
        let roles = match self.profile_roles(&name).await? {
            Some(roles) => roles,
            None => {
                let mut create = self
                    .iam
                    .create_instance_profile()
                    .instance_profile_name(&name);
                for (key, value) in profile_tags(cluster, node_class) {
                    let tag = aws_sdk_iam::types::Tag::builder()
                        .key(key)
                        .value(value)
                        .build();
                    create =
                        create.tags(tag.map_err(|e| CloudError::InvalidRequest(e.to_string()))?);
                }
                match self.call("CreateInstanceProfile", create.send()).await {
                    Ok(_) => {
                        tracing::info!(instance_profile = %name, ec2nodeclass = node_class, "created instance profile")
                    }
                    Err(e) if code_of(&e) == Some("EntityAlreadyExists") => {}
                    Err(e) => return Err(e),
                }
                vec![]
            }
        };
        let changes = role_changes(&roles, role);
        for old in changes.remove {
            self.remove_role(&name, old).await?;
        }
        if changes.add {
            let add = self
                .iam
                .add_role_to_instance_profile()
                .instance_profile_name(&name)
                .role_name(role);
            if let Err(e) = self.call("AddRoleToInstanceProfile", add.send()).await {
                // A profile holds one role. Another resolution of the class (its status and the provisioner
                // resolve it independently, and so do two replicas) may have added it since we looked.
                let added_meanwhile = code_of(&e) == Some("LimitExceeded")
                    && self
                        .profile_roles(&name)
                        .await?
                        .is_some_and(|roles| roles.iter().any(|r| r == role));
                if !added_meanwhile {
                    return Err(role_error(node_class, role, e));
                }
            }
        }
        lock(&self.profiles).insert(name.clone(), role.to_owned());
        Ok(name)
    }

    /// `profile` (the class's `spec.instanceProfile`) when IAM has it; else the class is not ready, with the
    /// profile named, rather than launching instances EC2 will refuse.
    pub(super) async fn existing_profile(
        &self,
        class: &str,
        profile: &str,
    ) -> Result<String, CloudError> {
        match self.profile_roles(profile).await? {
            Some(_) => Ok(profile.to_owned()),
            None => Err(CloudError::NodeClassNotReady {
                name: class.to_owned(),
                reason: format!("{NO_INSTANCE_PROFILE}: {profile}"),
            }),
        }
    }

    /// The roles instance profile `name` holds; `None` when it does not exist.
    pub(super) async fn profile_roles(
        &self,
        name: &str,
    ) -> Result<Option<Vec<String>>, CloudError> {
        let get = self.iam.get_instance_profile().instance_profile_name(name);
        match self.call("GetInstanceProfile", get.send()).await {
            Ok(out) => Ok(Some(
                out.instance_profile
                    .map(|p| p.roles.into_iter().map(|r| r.role_name).collect())
                    .unwrap_or_default(),
            )),
            Err(e) if code_of(&e) == Some("NoSuchEntity") => Ok(None),
            Err(e) => Err(e),
        }
    }

    pub(super) async fn remove_role(&self, profile: &str, role: &str) -> Result<(), CloudError> {
        let remove = self
            .iam
            .remove_role_from_instance_profile()
            .instance_profile_name(profile)
            .role_name(role);
        gone_is_done(
            self.call("RemoveRoleFromInstanceProfile", remove.send())
                .await,
        )
    }

    /// Deletes the instance profile kerf manages for class `node_class`, emptied of its roles first (IAM
    /// refuses to delete a profile that holds one).
    pub(super) async fn delete_managed_profile(&self, node_class: &str) -> Result<(), CloudError> {
        let name = profile_name(&self.settings.cluster.name, &self.region, node_class);
        lock(&self.profiles).remove(&name);
        let Some(roles) = self.profile_roles(&name).await? else {
            return Ok(());
        };
        for role in &roles {
            self.remove_role(&name, role).await?;
        }
        let delete = self
            .iam
            .delete_instance_profile()
            .instance_profile_name(&name);
        gone_is_done(self.call("DeleteInstanceProfile", delete.send()).await)?;
        tracing::info!(instance_profile = %name, ec2nodeclass = node_class, "deleted instance profile");
        Ok(())
    }
}
