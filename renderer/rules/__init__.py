"""KubeRay's semantic validation rules, as pure checkers that return problems."""
