from configparser import ConfigParser
import setuptools, shlex

# nbdev's template: every piece of metadata lives in settings.ini.
config = ConfigParser(delimiters=['='])
config.read('settings.ini', encoding='utf-8')
cfg = config['DEFAULT']

for o in ('version', 'description', 'keywords', 'author', 'author_email', 'lib_name', 'user', 'license', 'min_python'):
    assert o in cfg, f'settings.ini is missing "{o}"'

licenses = {'apache2': ('Apache Software License 2.0', 'OSI Approved :: Apache Software License')}
statuses = ['1 - Planning', '2 - Pre-Alpha', '3 - Alpha', '4 - Beta', '5 - Production/Stable', '6 - Mature', '7 - Inactive']
py_versions = '3.10 3.11 3.12 3.13'.split()

requirements = shlex.split(cfg.get('requirements', ''))
dev_requirements = shlex.split(cfg.get('dev_requirements', ''))
docs_requirements = shlex.split(cfg.get('docs_requirements', ''))   # the course site: docs_site/README.md
lic = licenses[cfg['license'].lower()]
min_python = cfg['min_python']

setuptools.setup(
    name=cfg['lib_name'],
    version=cfg['version'],
    description=cfg['description'],
    keywords=cfg['keywords'].split(),
    author=cfg['author'],
    author_email=cfg['author_email'],
    license=lic[0],
    classifiers=[
        'Development Status :: ' + statuses[int(cfg['status'])],
        'Intended Audience :: ' + cfg['audience'].title(),
        'License :: ' + lic[1],
        'Natural Language :: ' + cfg['language'].title(),
    ] + ['Programming Language :: Python :: ' + o for o in py_versions[py_versions.index(min_python):]],
    url=cfg['git_url'],
    packages=setuptools.find_packages(include=[cfg['lib_name'], cfg['lib_name'] + '.*']),
    include_package_data=True,
    package_data={cfg['lib_name']: ['assets/*']},
    install_requires=requirements,
    extras_require={'dev': dev_requirements, 'docs': docs_requirements},
    python_requires='>=' + min_python,
    long_description=open('README.md', encoding='utf-8').read(),
    long_description_content_type='text/markdown',
    zip_safe=False,
    entry_points={'nbdev': [f'{cfg.get("lib_path")}={cfg.get("lib_path")}._modidx:d']},
)
