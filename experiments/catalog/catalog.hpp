// The experiments of `flashcheck experiment` and `flashcheck report`, one file each.
#pragma once

#include "experiments/experiment.hpp"

namespace fc::experiments {

Experiment error_vs_seqlen_experiment();    // error_vs_seqlen.cpp
Experiment error_vs_flatness_experiment();  // error_vs_flatness.cpp
Experiment error_vs_outliers_experiment();  // error_vs_outliers.cpp
Experiment rounding_experiment();           // rounding.cpp
Experiment rescale_experiment();            // rescale.cpp
Experiment memory_scaling_experiment();     // memory_scaling.cpp
Experiment gradcheck_matrix_experiment();   // gradcheck_matrix.cpp
Experiment attnres_error_experiment();      // attnres_error.cpp
Experiment fa3_accuracy_experiment();       // fa3_accuracy.cpp

}  // namespace fc::experiments
