// The shared files of the AWS CLI and SDKs: ~/.aws/credentials and ~/.aws/config (or where
// AWS_SHARED_CREDENTIALS_FILE and AWS_CONFIG_FILE say), and the profile AWS_PROFILE names in
// them. The credential chain (credential_chain.cpp) takes keys, a role or a helper program from
// that profile; the S3 settings take its region. Which section is the profile, as botocore
// decides: in the credentials file the section named NAME; in the config file [default] for
// "default" and [profile NAME] (NAME as shlex splits it) for any, the last one in the file
// when two name the same profile. The files' syntax: aws_ini.h.
#pragma once

#include <string>

#include "remote/aws_ini.h"

namespace dlrun::remote {

/// The AWS_PROFILE profile ("default" when unset) as the two files hold it.
struct AwsProfile {
  std::string name;
  bool named = false;                         ///< AWS_PROFILE was set
  std::string credentials_file, config_file;  ///< where the files were looked for ("" without HOME)
  bool in_credentials = false, in_config = false;  ///< whether each file has the profile
  IniSection credentials, config;             ///< its keys in each file (empty when absent)
};

/// Reads both files (a missing file has no profiles). Throws dlrun::Error (exit 2) naming the
/// file when one cannot be read or botocore would refuse it (aws_ini.h).
AwsProfile load_aws_profile();

/// `key` in `section`, "" when absent.
std::string ini_value(const IniSection& section, const std::string& key);

/// The `region` of the AWS_PROFILE profile in the config file ("" when none), which the SDKs
/// use after AWS_REGION and AWS_DEFAULT_REGION.
std::string profile_region();

}  // namespace dlrun::remote
