// Forward-mode autodiff of the attention forward, instantiated for quad.
#include "oracle/autodiff_impl.hpp"

namespace fc::oracle {

template AttentionJvp<quad> attention_jvp<quad>(const AttentionProblem&, AttentionInputs<quad>, AttentionInputs<quad>);
template AttentionSecondDirectional<quad> attention_second_directional<quad>(const AttentionProblem&, AttentionInputs<quad>,
                                                                         AttentionInputs<quad>, AttentionInputs<quad>);
template std::vector<quad> attention_hvp<quad>(const AttentionProblem&, AttentionInputs<quad>, std::span<const quad>,
                                                  AttentionInputs<quad>, std::span<const std::size_t>);
template AttnResJvp<quad> attnres_jvp<quad>(const AttnResShape&, std::span<const quad>, std::span<const quad>,
                                           std::span<const quad>, std::span<const quad>, std::span<const quad>,
                                           std::span<const quad>);

}  // namespace fc::oracle
