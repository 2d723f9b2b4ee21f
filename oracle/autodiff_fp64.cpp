// Forward-mode autodiff of the attention forward, instantiated for double.
#include "oracle/autodiff_impl.hpp"

namespace fc::oracle {

template AttentionJvp<double> attention_jvp<double>(const AttentionProblem&, AttentionInputs<double>, AttentionInputs<double>);
template AttentionSecondDirectional<double> attention_second_directional<double>(const AttentionProblem&, AttentionInputs<double>,
                                                                         AttentionInputs<double>, AttentionInputs<double>);
template std::vector<double> attention_hvp<double>(const AttentionProblem&, AttentionInputs<double>, std::span<const double>,
                                                  AttentionInputs<double>, std::span<const std::size_t>);
template AttnResJvp<double> attnres_jvp<double>(const AttnResShape&, std::span<const double>, std::span<const double>,
                                           std::span<const double>, std::span<const double>, std::span<const double>,
                                           std::span<const double>);

}  // namespace fc::oracle
