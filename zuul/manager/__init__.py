"""Pipeline managers, by the pipeline ``manager:`` value."""

from zuul.manager.dependent import DependentPipelineManager
from zuul.manager.independent import IndependentPipelineManager
from zuul.manager.supercedent import SupercedentPipelineManager

MANAGERS = {
    'independent': IndependentPipelineManager,
    'dependent': DependentPipelineManager,
    'supercedent': SupercedentPipelineManager,
}


def manager_for(pipeline, ctx):
    try:
        cls = MANAGERS[pipeline.manager]
    except KeyError:
        raise ValueError(f'pipeline {pipeline.name}: unsupported manager '
                         f'"{pipeline.manager}"') from None
    return cls(pipeline, ctx)
