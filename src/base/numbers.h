// Numeric constants shared by the augmentations, the synthetic data and the schedules.
#pragma once

namespace dlrun {

inline constexpr double kPi = 3.14159265358979323846;

}  // namespace dlrun
