// The AWS variables the credential chain reads (src/remote/credential_chain.cpp), all unset for
// a scope, with the shared files pointed at nothing and the instance metadata service off: a
// test then sets only what it is about, and never reaches a real credential source.
#pragma once

#include "support/env.h"

namespace dlrun::testing {

struct CleanAwsEnv {
  ScopedEnv a{"AWS_ACCESS_KEY_ID", nullptr}, b{"AWS_SECRET_ACCESS_KEY", nullptr}, c{"AWS_SESSION_TOKEN", nullptr},
      d{"AWS_PROFILE", nullptr}, e{"AWS_SHARED_CREDENTIALS_FILE", "/nonexistent/credentials"},
      f{"AWS_CONFIG_FILE", "/nonexistent/config"}, g{"AWS_WEB_IDENTITY_TOKEN_FILE", nullptr}, h{"AWS_ROLE_ARN", nullptr},
      i{"AWS_CONTAINER_CREDENTIALS_RELATIVE_URI", nullptr}, j{"AWS_CONTAINER_CREDENTIALS_FULL_URI", nullptr},
      k{"AWS_CONTAINER_AUTHORIZATION_TOKEN", nullptr}, l{"AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE", nullptr},
      m{"AWS_EC2_METADATA_DISABLED", "true"}, n{"AWS_EC2_METADATA_SERVICE_ENDPOINT", nullptr},
      o{"AWS_ENDPOINT_URL_STS", nullptr}, p{"AWS_ENDPOINT_URL", nullptr}, q{"AWS_ROLE_SESSION_NAME", nullptr};
};

}  // namespace dlrun::testing
